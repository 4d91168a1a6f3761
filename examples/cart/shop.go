package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
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
	url      *url.URL
}

// startShop starts an instance on a free local port, with its own client.
func startShop(name, prefix string, c *client.Client) (*shop, error) {
	sessions, err := recipe.NewSessionStore(c, recipe.WithSessionStorePrefix(prefix),
		recipe.WithSessionStoreTTL(time.Hour))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &shop{name: name, c: c, sessions: sessions, url: &url.URL{Scheme: "http", Host: ln.Addr().String()}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cart", s.get)
	mux.HandleFunc("POST /cart/add", s.add)
	s.srv = &http.Server{Handler: mux}
	go s.srv.Serve(ln)
	return s, nil
}

// stop shuts the instance down and closes its client.
func (s *shop) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	s.c.Close()
}

// add puts ?item= into the caller's cart; a caller without a session
// cookie gets a new session.
func (s *shop) add(w http.ResponseWriter, r *http.Request) {
	token := ""
	if ck, err := r.Cookie("sid"); err == nil {
		token = ck.Value
	} else {
		var b [16]byte
		_, _ = rand.Read(b[:])
		token = hex.EncodeToString(b[:])
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: token, Path: "/", HttpOnly: true})
	}
	item := r.URL.Query().Get("item")
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
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.reply(w, data)
}

func (s *shop) get(w http.ResponseWriter, r *http.Request) {
	var data []byte
	if ck, err := r.Cookie("sid"); err == nil {
		d, _, err := s.sessions.Get(r.Context(), ck.Value)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		data = d
	}
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

// proxy is a round-robin load balancer over the instances.
type proxy struct {
	mu       sync.Mutex
	backends []*url.URL
	next     int
}

func (p *proxy) set(i int, u *url.URL) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends[i] = u
}

func (p *proxy) pick() *url.URL {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.backends[p.next%len(p.backends)]
	p.next++
	return u
}

func (p *proxy) handler() http.Handler {
	return &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(p.pick()) }}
}
