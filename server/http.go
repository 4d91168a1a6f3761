package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storekeys"
	"github.com/dkv-io/dkv/internal/ui"
	"github.com/dkv-io/dkv/server/httpapi"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// startHTTP serves the HTTP/JSON gateway (/v1/...), the plain-value key
// endpoint (/v1/keys/KEY), the dashboard (/ui/, internal/ui), /metrics,
// /livez, /readyz and, with Pprof, /debug/pprof. The gateway reaches the gRPC services in-process.
func (s *Server) startHTTP(ctx context.Context) error {
	if s.httpLis == nil {
		return nil
	}
	conn, err := s.dialPipe(s.gwInproc)
	if err != nil {
		return err
	}
	s.gwConn = conn
	gw := runtime.NewServeMux(append(gatewayCNOptions(), runtime.WithMarshalerOption(runtime.MIMEWildcard, &strictJSONPb{runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}}), runtime.WithErrorHandler(s.gatewayError))...)
	bg := context.Background()
	if err := dkvpb.RegisterKVHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterClusterHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterMaintenanceHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterLeaseHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterLockHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterWatchHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterRateLimitHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterQueueHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterQueryHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterAuthHandler(bg, gw, conn); err != nil {
		return err
	}
	if err := dkvpb.RegisterStoreHandler(bg, gw, conn); err != nil {
		return err
	}
	etcdGW, err := s.etcdGateway(conn)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", gatewayStore(gw))
	mux.Handle("/v3/", gatewayStore(etcdGW))
	mux.HandleFunc("/v1/keys/", s.handleKey)
	mux.HandleFunc("GET /v1/watch", s.handleWatchHTTP)
	mux.HandleFunc("POST /v1/watch", s.handleWatchPost(gw))
	api := httpapi.New(httpNode{s})
	mux.HandleFunc("GET /v1/locks", api.Locks)
	mux.HandleFunc("GET /v1/ratelimits", api.RateLimits)
	mux.HandleFunc("GET /v1/cluster/progress", api.ClusterProgress)
	mux.HandleFunc("GET /v1/cluster/statuses", api.ClusterStatuses)
	mux.HandleFunc("GET /v1/auth/whoami", api.Whoami)
	mux.Handle("/ui/", ui.Handler())
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("/metrics", s.metricsHTTP(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", s.handleReadyz)
	if s.cfg.Pprof {
		// Root only with auth enabled: a profile shows keys and values.
		mux.HandleFunc("/debug/pprof/", s.requireRootHTTP(pprof.Index))
		mux.HandleFunc("/debug/pprof/cmdline", s.requireRootHTTP(pprof.Cmdline))
		mux.HandleFunc("/debug/pprof/profile", s.requireRootHTTP(pprof.Profile))
		mux.HandleFunc("/debug/pprof/symbol", s.requireRootHTTP(pprof.Symbol))
		mux.HandleFunc("/debug/pprof/trace", s.requireRootHTTP(pprof.Trace))
	}
	lis := s.httpLis
	s.httpSrv = &http.Server{Handler: s.capBodies(gw, mux), ReadHeaderTimeout: handshakeTimeout, IdleTimeout: httpIdleTimeout}
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
	s.httpSrv.Handler = httpapi.Guard(httpapi.GuardConfig{
		Own:          []string{s.cfg.HTTPAddr, s.HTTPAddr(), s.cfg.ClientAddr, s.ClientAddr(), s.cfg.AdvertiseClientAddr, s.advClient},
		AllowedHosts: s.cfg.HTTPAllowedHosts, AllowedOrigins: s.cfg.CORSAllowedOrigins,
	}, s.httpSrv.Handler)
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

// withClientCN records the verified client certificate's CN (or none)
// in the request's context, for the handlers called directly
// (peerCommonName); a handler reached through the gateway gets it as
// gatewayCNHeader.
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

// gatewayCNOptions make the gateway pass the HTTP client's verified
// certificate CN on to the gRPC handlers, and nothing else in its place.
func gatewayCNOptions() []runtime.ServeMuxOption {
	return []runtime.ServeMuxOption{runtime.WithIncomingHeaderMatcher(gatewayHeaderMatcher), runtime.WithMetadata(gatewayClientCN)}
}

// gatewayClientCN passes the HTTP client's verified CN, and its address
// (the source a login is throttled by, logins.go), to the gRPC handler
// the gateway calls.
func gatewayClientCN(_ context.Context, r *http.Request) metadata.MD {
	md := metadata.Pairs(gatewayClientAddrHeader, r.RemoteAddr)
	if leaf := verifiedLeaf(r.TLS); leaf != nil && leaf.Subject.CommonName != "" {
		md.Set(gatewayCNHeader, leaf.Subject.CommonName)
	}
	return md
}

// gatewayHeaderMatcher is the gateway's default header mapping, except
// that no HTTP header may set gatewayCNHeader (only a verified
// certificate does) or gatewayClientAddrHeader (only the connection).
func gatewayHeaderMatcher(key string) (string, bool) {
	switch strings.TrimPrefix(strings.ToLower(key), strings.ToLower(runtime.MetadataHeaderPrefix)) {
	case gatewayCNHeader, gatewayClientAddrHeader:
		return "", false
	}
	if strings.EqualFold(key, "Dkv-Store") {
		return storeHeader, true
	}
	return runtime.DefaultHeaderMatcher(key)
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

// handleKey is the plain-value convenience API: GET returns the raw value
// (404 if absent), PUT stores the request body, DELETE deletes. The key is
// the rest of the path.
func (s *Server) handleKey(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/keys/")
	kv := &kvService{s: s}
	// These calls bypass grpcSrv and its interceptors: map the key into
	// the request's store (?store= or Dkv-Store) and authorize here.
	ctx, store, err := s.httpStore(r)
	if err != nil {
		httpError(w, wireError(err))
		return
	}
	pk, err := store.Key([]byte(name))
	if err != nil {
		httpError(w, err)
		return
	}
	key := string(pk)
	check := func(method string, req any) (err error) {
		ctx, err = s.checkCall(ctx, method, req)
		return err
	}
	switch r.Method {
	case http.MethodGet:
		var resp *dkvpb.RangeResponse
		req := &dkvpb.RangeRequest{Key: []byte(key), Serializable: r.URL.Query().Get("serializable") == "true"}
		if err = check(dkvpb.KV_Range_FullMethodName, req); err != nil {
			break
		}
		resp, err = kv.Range(ctx, req)
		if err == nil {
			if len(resp.Kvs) == 0 {
				http.Error(w, fmt.Sprintf("key %q not found", name), http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("X-Dkv-Mod-Revision", fmt.Sprint(resp.Kvs[0].ModRevision))
			w.Header().Set("X-Dkv-Version", fmt.Sprint(resp.Kvs[0].Version))
			w.Write(resp.Kvs[0].Value)
			return
		}
	case http.MethodPut, http.MethodPost:
		body, rerr := io.ReadAll(r.Body) // capped by capBodies
		if rerr != nil {
			if g, _ := r.Context().Value(bodyGuardKey{}).(*bodyGuard); g != nil && g.tripped.Load() {
				w.Header().Set("X-Dkv-Status", dkverr.InvalidInput.Reason())
				http.Error(w, g.message(), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, rerr.Error(), http.StatusBadRequest)
			return
		}
		var resp *dkvpb.PutResponse
		req := &dkvpb.PutRequest{Key: []byte(key), Value: body}
		if err = check(dkvpb.KV_Put_FullMethodName, req); err != nil {
			break
		}
		resp, err = kv.Put(ctx, req)
		if err == nil {
			w.Header().Set("X-Dkv-Revision", fmt.Sprint(resp.Header.Revision))
			fmt.Fprintln(w, "OK")
			return
		}
	case http.MethodDelete:
		var resp *dkvpb.DeleteRangeResponse
		req := &dkvpb.DeleteRangeRequest{Key: []byte(key)}
		if err = check(dkvpb.KV_DeleteRange_FullMethodName, req); err != nil {
			break
		}
		resp, err = kv.DeleteRange(ctx, req)
		if err == nil {
			fmt.Fprintln(w, resp.Deleted)
			return
		}
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// This endpoint calls the handlers directly, not through grpcSrv, so
	// it maps the error itself, as the interceptors do.
	httpError(w, wireError(err))
}

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
