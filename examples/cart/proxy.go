package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"time"
)

// proxy is a round-robin load balancer over the instances. A backend
// that refuses the connection (a killed instance) is skipped: the
// request goes to the next one, since it never reached the first. A
// request that reached a backend which then failed is answered 502, not
// sent again: whether that add landed is unknown, and sending it again
// could add the item twice.
type proxy struct {
	mu       sync.Mutex
	backends []*url.URL
	next     int
	emit     func(what string, kv ...any) // an event per request; nil: none
}

func newProxy(emit func(string, ...any), addrs ...string) *proxy {
	p := &proxy{emit: emit}
	for _, a := range addrs {
		p.backends = append(p.backends, &url.URL{Scheme: "http", Host: a})
	}
	return p
}

func (p *proxy) set(i int, addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends[i] = &url.URL{Scheme: "http", Host: addr}
}

func (p *proxy) pick() *url.URL {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.backends[p.next%len(p.backends)]
	p.next++
	return u
}

func (p *proxy) log(what string, kv ...any) {
	if p.emit != nil {
		p.emit(what, kv...)
	}
}

// maxBody bounds what the proxy buffers of a request, to send it again.
const maxBody = 1 << 20

func (p *proxy) handler() http.Handler {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
		// A fresh connection per request: a dead instance then always
		// shows as a refused connection, which is safe to pass on,
		// never as a kept-alive one that breaks after the request was
		// written, which is not.
		DisableKeepAlives: true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(p.pick()) },
		Transport: &failover{p: p, tr: tr},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log("bad-gateway", "req", r.Method+" "+r.URL.RequestURI(), "err", err, "answered", http.StatusBadGateway)
			http.Error(w, "bad gateway: "+err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Buffer the body, so that a request a dead backend refused can
		// go to the next one whole.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		rp.ServeHTTP(w, r)
	})
}

// dialError marks a connection the backend refused: the request was not
// sent.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// failover sends a request to the backend Rewrite picked, and on to the
// ones after it in the list while they refuse the connection.
type failover struct {
	p  *proxy
	tr *http.Transport
}

func (f *failover) RoundTrip(r *http.Request) (*http.Response, error) {
	// On a refusal go on through the backends after the refusing one,
	// each once: picking again from the shared rotation could land on
	// the dead one again while other requests move it on.
	f.p.mu.Lock()
	backends := slices.Clone(f.p.backends)
	f.p.mu.Unlock()
	first := slices.IndexFunc(backends, func(u *url.URL) bool { return u.Host == r.URL.Host })
	for try := 1; ; try++ {
		resp, err := f.tr.RoundTrip(r)
		var de *dialError
		if err == nil {
			f.p.log("proxied", "req", r.Method+" "+r.URL.RequestURI(), "to", r.URL.Host, "status", resp.StatusCode)
			return resp, nil
		}
		if !errors.As(err, &de) || first < 0 || try >= len(backends) || r.Context().Err() != nil {
			return nil, err
		}
		next := backends[(first+try)%len(backends)]
		f.p.log("down", "req", r.Method+" "+r.URL.RequestURI(), "backend", r.URL.Host, "err", de.err, "next", next.Host)
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host, r.Host = next.Scheme, next.Host, next.Host
		if r.GetBody != nil {
			if r.Body, err = r.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}
