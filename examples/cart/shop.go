package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"html/template"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// Cart is what the shop answers: the items, and which instance answered.
type Cart struct {
	Instance string   `json:"instance"`
	Items    []string `json:"items"`
}

// shop is one stateless instance of the web shop: every cart lives in
// the session store, none in the instance's memory.
type shop struct {
	name     string
	c        *client.Client
	sessions *recipe.SessionStore
	srv      *http.Server
	addr     string                       // where it listens, host:port
	emit     func(what string, kv ...any) // an event line per request
}

// startShop starts an instance listening on addr ("127.0.0.1:0" for a
// free port), with its own client. emit, if not nil, gets an event per
// request.
func startShop(name, prefix, addr string, c *client.Client, emit func(string, ...any)) (*shop, error) {
	sessions, err := recipe.NewSessionStore(c, recipe.WithSessionStorePrefix(prefix),
		recipe.WithSessionStoreTTL(time.Hour))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if emit == nil {
		emit = func(string, ...any) {}
	}
	s := &shop{name: name, c: c, sessions: sessions, addr: ln.Addr().String(), emit: emit}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /cart", s.get)
	mux.HandleFunc("POST /cart/add", s.add)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// stop shuts the instance down, letting requests in flight finish, and
// closes its client.
func (s *shop) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	s.c.Close()
}

// add puts the form value item (from the query or a posted form) into
// the caller's cart; a caller without a session cookie gets a new
// session. A posted form is answered with a redirect to the page, so
// that a reload does not post it again; anything else with the cart.
func (s *shop) add(w http.ResponseWriter, r *http.Request) {
	item := r.FormValue("item")
	if strings.TrimSpace(item) == "" {
		http.Error(w, "no item to add", http.StatusBadRequest)
		return
	}
	token := ""
	if ck, err := r.Cookie("sid"); err == nil {
		token = ck.Value
	} else {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token = hex.EncodeToString(b[:])
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	}
	// Update re-reads and re-applies on a conflicting write, so two
	// instances adding to one cart at once both land.
	data, err := s.sessions.Update(r.Context(), token, func(old []byte) ([]byte, error) {
		var items []string
		if old != nil {
			if err := json.Unmarshal(old, &items); err != nil {
				return nil, err
			}
		}
		return json.Marshal(append(items, item))
	})
	if err != nil {
		s.emit("failed", "req", "POST /cart/add", "item", item, "session", short(token), "err", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.emit("added", "item", item, "session", short(token), "items", count(data))
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.reply(w, data)
}

// cart reads the caller's cart: nil without a session.
func (s *shop) cart(r *http.Request) (data []byte, token string, err error) {
	ck, err := r.Cookie("sid")
	if err != nil {
		return nil, "", nil
	}
	data, _, err = s.sessions.Get(r.Context(), ck.Value)
	return data, ck.Value, err
}

func (s *shop) get(w http.ResponseWriter, r *http.Request) {
	data, token, err := s.cart(r)
	if err != nil {
		s.emit("failed", "req", "GET /cart", "session", short(token), "err", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.emit("cart", "session", short(token), "items", count(data))
	s.reply(w, data)
}

func (s *shop) reply(w http.ResponseWriter, data []byte) {
	cart := Cart{Instance: s.name, Items: []string{}}
	if data != nil {
		if err := json.Unmarshal(data, &cart.Items); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(cart)
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Cart</title><link rel="icon" href="data:,"></head>
<body><main>
<h1>Your cart</h1>
<p>Served by instance <b id="instance">{{.Instance}}</b>.</p>
<p id="count" data-n="{{len .Items}}">{{len .Items}} {{if eq (len .Items) 1}}item{{else}}items{{end}}</p>
<ol id="items">{{range .Items}}<li>{{.}}</li>{{end}}</ol>
<form method="post" action="/cart/add">
<input id="item" name="item" placeholder="item" required autofocus>
<button id="add" type="submit">Add</button>
</form>
</main></body></html>
`))

// page is the shop for a browser: the cart, and a form to add to it.
func (s *shop) page(w http.ResponseWriter, r *http.Request) {
	data, token, err := s.cart(r)
	if err != nil {
		s.emit("failed", "req", "GET /", "session", short(token), "err", err)
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	cart := Cart{Instance: s.name, Items: []string{}}
	if data != nil {
		if err := json.Unmarshal(data, &cart.Items); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	}
	s.emit("page", "session", short(token), "items", len(cart.Items))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	pageTmpl.Execute(w, cart)
}

// short is the start of a session token, enough to tell sessions apart
// in a log without writing the secret down.
func short(token string) string {
	if token == "" {
		return "none"
	}
	return token[:min(6, len(token))] + "…"
}

func count(data []byte) int {
	var items []string
	_ = json.Unmarshal(data, &items)
	return len(items)
}
