package gorillastore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/contrib/gorillastore"
	"github.com/dkv-io/dkv/server/embed"
	"github.com/gorilla/sessions"
)

var _ sessions.Store = (*gorillastore.Store)(nil)

// Two web instances with their own stores on one DKV store share a
// user's session: a counter incremented alternately through each ends
// where it should; after logout (MaxAge -1) the session is gone from
// DKV; a forged cookie gets a new session.
func TestSharedSessionAcrossInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ss, err := recipe.NewSessionStore(c)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	instance := func() *httptest.Server {
		st := gorillastore.New(ss, key)
		mux := http.NewServeMux()
		mux.HandleFunc("/inc", func(w http.ResponseWriter, r *http.Request) {
			s, err := st.Get(r, "sid")
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			n, _ := s.Values["n"].(int)
			s.Values["n"] = n + 1
			if err := s.Save(r, w); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			io.WriteString(w, strconv.Itoa(n+1))
		})
		mux.HandleFunc("/logout", func(w http.ResponseWriter, r *http.Request) {
			s, _ := st.Get(r, "sid")
			s.Options.MaxAge = -1
			if err := s.Save(r, w); err != nil {
				http.Error(w, err.Error(), 500)
			}
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := instance(), instance()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := cl.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for i := 1; i <= 6; i++ {
		srv := a.URL
		if i%2 == 0 {
			srv = b.URL
		}
		if code, got := get(srv + "/inc"); code != 200 || got != strconv.Itoa(i) {
			t.Fatalf("request %d: %d %s", i, code, got)
		}
	}
	all, err := ss.List(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("%d sessions in DKV (%v), want 1", len(all), err)
	}
	if code, _ := get(b.URL + "/logout"); code != 200 {
		t.Fatalf("logout: %d", code)
	}
	if all, err := ss.List(ctx); err != nil || len(all) != 0 {
		t.Fatalf("%d sessions in DKV after logout (%v), want 0", len(all), err)
	}
	if code, got := get(a.URL + "/inc"); code != 200 || got != "1" {
		t.Fatalf("after logout: %d %s, want a new session", code, got)
	}

	// A cookie not signed with the key: refused, nothing read.
	req, _ := http.NewRequest("GET", a.URL+"/inc", nil)
	req.AddCookie(&http.Cookie{Name: "sid", Value: "forged"})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("forged cookie: %d, want 400", resp.StatusCode)
	}
}
