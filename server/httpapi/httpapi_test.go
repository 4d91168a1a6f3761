package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/dkverr"
)

// The package stands alone: the guard, the status mapping and the list
// endpoints' argument checks answer without a node behind them.

func TestGuardRefusesForeignHostAndOrigin(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := Guard(GuardConfig{Own: []string{"db1.example:2380"}, AllowedOrigins: []string{"https://ops.example"}}, ok)
	for _, tc := range []struct {
		name, host, origin, path string
		want                     int
	}{
		{"own name", "db1.example:2380", "", "/v1/locks", http.StatusTeapot},
		{"localhost", "localhost:2380", "", "/v1/locks", http.StatusTeapot},
		{"rebound name", "evil.example", "", "/v1/locks", http.StatusMisdirectedRequest},
		{"probe by any name", "evil.example", "", "/livez", http.StatusTeapot},
		{"foreign origin", "db1.example:2380", "https://evil.example", "/v1/locks", http.StatusForbidden},
		{"allowed origin", "db1.example:2380", "https://ops.example", "/v1/locks", http.StatusTeapot},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://"+tc.host+tc.path, nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, w.Code, tc.want, strings.TrimSpace(w.Body.String()))
		}
	}
}

func TestErrorStatus(t *testing.T) {
	for code, want := range map[dkverr.Code]int{
		dkverr.NoSpace: http.StatusInsufficientStorage, dkverr.Locked: http.StatusLocked,
		dkverr.Conflict: http.StatusConflict, dkverr.Internal: http.StatusInternalServerError,
	} {
		w := httptest.NewRecorder()
		Error(w, dkverr.New(code, "x"))
		if w.Code != want || w.Header().Get("X-Dkv-Status") != code.Reason() {
			t.Errorf("%v: status %d, X-Dkv-Status %q; want %d, %q", code, w.Code, w.Header().Get("X-Dkv-Status"), want, code.Reason())
		}
	}
}

func TestListLimitChecked(t *testing.T) {
	a := New(nil) // the limit is checked before the node is asked anything
	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		w := httptest.NewRecorder()
		a.Locks(w, httptest.NewRequest(http.MethodGet, "/v1/locks?"+q, nil))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "must be an integer from 1 to 1000") {
			t.Errorf("%s: %d %q, want 400 naming the bounds", q, w.Code, w.Body.String())
		}
	}
}
