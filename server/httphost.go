package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storekeys"
	"github.com/dkv-io/dkv/server/httpapi"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/metadata"
)

// startHTTP serves the HTTP port: the HTTP/JSON gateway, the plain-value
// key endpoint, the dashboard and its endpoints (httpapi.Handler), and
// the node's own /metrics, /livez, /readyz and, with Pprof,
// /debug/pprof. The gateway reaches the gRPC services in-process. The
// node owns the listener, TLS and the serving goroutine.
func (s *Server) startHTTP(ctx context.Context) error {
	if s.httpLis == nil {
		return nil
	}
	conn, err := s.dialPipe(s.gwInproc)
	if err != nil {
		return err
	}
	s.gwConn = conn
	o := s.httpOptions()
	if s.cfg.Pprof {
		// Root only with auth enabled: a profile shows keys and values.
		o.Pprof = map[string]http.HandlerFunc{
			"/debug/pprof/":        s.requireRootHTTP(pprof.Index),
			"/debug/pprof/cmdline": s.requireRootHTTP(pprof.Cmdline),
			"/debug/pprof/profile": s.requireRootHTTP(pprof.Profile),
			"/debug/pprof/symbol":  s.requireRootHTTP(pprof.Symbol),
			"/debug/pprof/trace":   s.requireRootHTTP(pprof.Trace),
		}
	}
	h, err := httpapi.New(httpNode{s}).Handler(conn, o)
	if err != nil {
		return err
	}
	lis := s.httpLis
	s.httpSrv = &http.Server{Handler: h, ReadHeaderTimeout: handshakeTimeout, IdleTimeout: httpIdleTimeout, ErrorLog: s.httpErrorLog()}
	var tlsOn bool
	if s.tls != nil && s.tls.clientServer != nil {
		s.httpSrv.TLSConfig = s.tls.clientServer.Clone() // HTTPS, with the client port's settings
		requireCert := s.httpSrv.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert
		if requireCert {
			// The handshake asks for a certificate and verifies any
			// offered, but a missing one is refused per request, so
			// that probes and scrapers reach /livez, /readyz and
			// /metrics without one (docs/security.md).
			s.httpSrv.TLSConfig.ClientAuth = tls.VerifyClientCertIfGiven
		}
		// Only with TLS is there a certificate to pass on: the
		// plaintext path keeps its one allocation less per request.
		s.httpSrv.Handler = withClientCN(s.httpSrv.Handler, requireCert)
		tlsOn = true
	}
	// Outermost: a request from a web page that may not use this port is
	// refused before it reaches anything else (httpapi.Guard).
	s.httpSrv.Handler = s.httpGuard(s.httpSrv.Handler)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		l := s.limitListen(lis, s.clientSlots, "HTTP")
		var err error
		if tlsOn {
			err = s.httpSrv.ServeTLS(l, "", "") // the certificate comes from TLSConfig
		} else {
			err = s.httpSrv.Serve(l)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// httpOptions are the limits and the node's own endpoints every HTTP
// listener serves (the HTTP port's and the client port's HTTP side).
func (s *Server) httpOptions() httpapi.Options {
	return httpapi.Options{
		MaxValueBytes:   s.cfg.MaxValueBytes,
		MaxRequestBytes: s.maxRequestBytes(),
		EnvelopeBytes:   requestEnvelopeBytes,
		Metrics:         s.metricsHTTP(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})),
		Readyz:          http.HandlerFunc(s.handleReadyz),
	}
}

// httpGuard wraps h, outermost, in the guard every HTTP listener of the
// node has (httpapi.Guard): this member's addresses are its own hosts.
func (s *Server) httpGuard(h http.Handler) http.Handler {
	return httpapi.Guard(httpapi.GuardConfig{
		Own:          []string{s.cfg.HTTPAddr, s.HTTPAddr(), s.cfg.ClientAddr, s.ClientAddr(), s.cfg.AdvertiseClientAddr, s.advClient},
		AllowedHosts: s.cfg.HTTPAllowedHosts, AllowedOrigins: s.cfg.CORSAllowedOrigins,
	}, h)
}

// withClientCN records the verified client certificate's CN (or none)
// in the request's context, for the handlers called directly
// (peerCommonName); a handler reached through the gateway gets it as
// httpapi.CNMetadata.
//
// With requireCert (--client-cert-auth) a request without a verified
// certificate is refused, except for the open health and metrics paths.
func withClientCN(h http.Handler, requireCert bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cn := ""
		leaf := verifiedLeaf(r.TLS)
		if leaf != nil {
			cn = leaf.Subject.CommonName
		} else if requireCert && !openPath(r.URL.Path) {
			http.Error(w, "dkv: a client certificate signed by the trusted CA is required (--client-cert-auth); only /livez, /readyz and /metrics are open without one", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), cnKey{}, cn)))
	})
}

// openPath reports the paths served without a client certificate:
// health probes and metrics scrapes (with auth enabled, /metrics takes a
// token instead, metricsHTTP).
func openPath(p string) bool {
	return p == "/livez" || p == "/readyz" || p == "/metrics"
}

// metricsHTTP guards /metrics: with auth enabled it needs a token or a
// client certificate of any user (metric labels name queues, which are
// keys), unless --metrics-open. Prometheus scrapes with a bearer token
// (authorization.credentials_file) or mTLS (docs/operations.md).
func (s *Server) metricsHTTP(h http.Handler) http.Handler {
	if s.cfg.MetricsOpen {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := s.sm.Auth().View(); v.Enabled {
			if _, err := s.callerOf(httpAuthContext(r), v); err != nil {
				s.denied("", "HTTP /metrics", "", err)
				code := dkverr.CodeOf(err)
				st := httpStatus[code]
				if st == 0 {
					st = http.StatusUnauthorized
				}
				w.Header().Set("X-Dkv-Status", code.Reason())
				http.Error(w, dkverr.Message(err)+" (/metrics needs a token or client certificate of any user while auth is enabled, or --metrics-open)", st)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// handleReadyz answers 200 once the node has reported Ready and while a
// linearizable read succeeds within a second: the node has a leader and
// is caught up.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.ready:
	default:
		// Ready also waits for a start-up NOSPACE alarm to commit.
		http.Error(w, "not ready: starting", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	// The warning line does not change the status: the member serves,
	// but whoever reads the probe (and the dashboard) should know.
	warn := ""
	if s.InsecurePeer() {
		warn = insecurePeerLine + "\n"
	}
	if err := s.node.WaitLinearizable(ctx); err != nil {
		http.Error(w, "not ready: "+err.Error()+"\n"+warn, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprint(w, "ok\n"+warn)
}

// insecurePeerLine is the line /readyz adds while InsecurePeer.
const insecurePeerLine = "warning: insecure-peer"

// httpError answers err on an HTTP path (httpapi.Error).
func httpError(w http.ResponseWriter, err error) { httpapi.Error(w, err) }

// httpStatus is the HTTP status of each DKV outcome (httpapi.Status).
var httpStatus = httpapi.Status

// httpStore is the context of an HTTP request served without the
// gateway (its credentials and its store as incoming gRPC metadata) and
// the Mapper of its store: handlers map keys with it before they check
// permissions, which apply to the mapped keys.
func (s *Server) httpStore(r *http.Request) (context.Context, storekeys.Mapper, error) {
	ctx := httpAuthContext(r)
	if st := httpStoreName(r); st != "" {
		md, _ := metadata.FromIncomingContext(ctx)
		md = md.Copy()
		md.Set(storeHeader, st)
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	m, err := s.storeOf(ctx)
	return ctx, m, err
}

// httpStoreName is the store an HTTP request names: ?store=, else the
// Dkv-Store header; "" for the default store.
func httpStoreName(r *http.Request) string {
	if st := r.URL.Query().Get("store"); st != "" {
		return st
	}
	return r.Header.Get("Dkv-Store")
}

// jsonBodyLimit is the largest JSON body the gateway accepts
// (httpapi.JSONBodyLimit).
func (s *Server) jsonBodyLimit() int64 { return httpapi.JSONBodyLimit(s.maxRequestBytes()) }

// httpErrorLog is where net/http's own messages (a failed TLS handshake, a
// panic in a handler) go: the node's structured log, at WARN, in the
// same format as every other line, not the standard log's.
func (s *Server) httpErrorLog() *log.Logger {
	return slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
}
