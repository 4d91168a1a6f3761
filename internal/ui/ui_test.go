package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestHandlerServesAssets checks that /ui/ answers the index page and
// every asset with its content type, and that no asset reaches for
// another origin (no CDN: the dashboard works air-gapped).
func TestHandlerServesAssets(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("", Handler()))
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/ui/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, `<script type="module" src="app.js">`) {
		t.Fatalf("GET /ui/: %d %q, body %.200q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy = %q, want default-src 'self'", csp)
	}
	want := map[string]string{".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|cdn`)
	n := 0
	err := fs.WalkDir(Assets(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		n++
		ext := p[strings.LastIndex(p, "."):]
		resp, body := get("/ui/" + p)
		if resp.StatusCode != 200 {
			t.Errorf("GET /ui/%s: %d", p, resp.StatusCode)
		}
		if ct := resp.Header.Get("Content-Type"); want[ext] == "" || !strings.HasPrefix(ct, want[ext]) {
			t.Errorf("GET /ui/%s: Content-Type %q, want %q", p, ct, want[ext])
		}
		if m := external.FindString(body); m != "" {
			t.Errorf("/ui/%s refers to another origin: %q", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("only %d assets embedded", n)
	}
	if resp, _ := get("/ui/nope.js"); resp.StatusCode != 404 {
		t.Errorf("GET /ui/nope.js: %d, want 404", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/ui/", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: %d, want 405", resp.StatusCode)
	}
}
