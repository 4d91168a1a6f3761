// Package ui is DKV's web dashboard (docs/dashboard.md): static HTML, CSS
// and JavaScript modules embedded in the binary and served at /ui/ on the
// HTTP port. The page talks only to the public HTTP/JSON API (/v1/...)
// and /metrics, with the caller's token kept in memory.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Assets is the dashboard's files, rooted at the directory served at /ui/.
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory exists: a build error otherwise
	}
	return sub
}

// Handler serves the dashboard under /ui/ (index.html at /ui/).
func Handler() http.Handler {
	files := http.StripPrefix("/ui/", http.FileServerFS(Assets()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read with GET", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		// Everything comes from this member: no other origin is needed.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache") // assets change with the binary
		files.ServeHTTP(w, r)
	})
}
