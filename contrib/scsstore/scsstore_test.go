package scsstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/alexedwards/scs/v2"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/contrib/scsstore"
	"github.com/dkv-io/dkv/server/embed"
)

var (
	_ scs.Store            = (*scsstore.Store)(nil)
	_ scs.CtxStore         = (*scsstore.Store)(nil)
	_ scs.IterableStore    = (*scsstore.Store)(nil)
	_ scs.IterableCtxStore = (*scsstore.Store)(nil)
)

// Two web instances with their own scs managers on one DKV store share
// a user's session: a counter incremented alternately through each ends
// where it should, and the session is listed and destroyed through
// either.
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
	instance := func() (*scs.SessionManager, *httptest.Server) {
		m := scs.New()
		m.Store = scsstore.New(ss)
		m.Lifetime = time.Hour
		mux := http.NewServeMux()
		mux.HandleFunc("/inc", func(w http.ResponseWriter, r *http.Request) {
			n := m.GetInt(r.Context(), "n") + 1
			m.Put(r.Context(), "n", n)
			io.WriteString(w, strconv.Itoa(n))
		})
		mux.HandleFunc("/logout", func(w http.ResponseWriter, r *http.Request) {
			if err := m.Destroy(r.Context()); err != nil {
				http.Error(w, err.Error(), 500)
			}
		})
		srv := httptest.NewServer(m.LoadAndSave(mux))
		t.Cleanup(srv.Close)
		return m, srv
	}
	m1, a := instance()
	_, b := instance()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	get := func(base, path string) string {
		t.Helper()
		resp, err := cl.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		// The two test servers differ only by port; the cookie jar keys
		// cookies by host, so the session cookie follows to the other.
		return string(body)
	}
	for i := 1; i <= 6; i++ {
		srv := a.URL
		if i%2 == 0 {
			srv = b.URL
		}
		if got := get(srv, "/inc"); got != strconv.Itoa(i) {
			t.Fatalf("request %d: counter %s", i, got)
		}
	}
	all, err := m1.Store.(scs.IterableStore).All()
	if err != nil || len(all) != 1 {
		t.Fatalf("All: %d sessions, %v; want 1", len(all), err)
	}
	get(b.URL, "/logout")
	all, err = m1.Store.(scs.IterableStore).All()
	if err != nil || len(all) != 0 {
		t.Fatalf("All after logout: %d sessions, %v; want 0", len(all), err)
	}
}
