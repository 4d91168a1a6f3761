package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/dkv-io/dkv/server/etcdapi"
	"google.golang.org/grpc"
	"io"
	"net/http"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/api/dkv/v1/dkvgw"
	"github.com/dkv-io/dkv/api/dkv/v1/openapi"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/ui"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
)

// Options are the node's limits and its own endpoints on the HTTP port.
type Options struct {
	// MaxValueBytes is --max-value-bytes: the plain-value endpoint's
	// body limit.
	MaxValueBytes int
	// MaxRequestBytes is the gRPC server's request limit, EnvelopeBytes
	// what it allows beyond one value.
	MaxRequestBytes, EnvelopeBytes int
	// Metrics serves /metrics, Readyz /readyz.
	Metrics, Readyz http.Handler
	// Pprof are the /debug/pprof handlers by path (nil: none).
	Pprof map[string]http.HandlerFunc
}

// Handler is the whole HTTP port but its guard and TLS: the HTTP/JSON
// gateway (/v1/...) and etcd's (/v3/...), both reaching the gRPC
// services through conn (the node's in-process connection), the
// plain-value key endpoint (/v1/keys/KEY), GET /v1/watch, the gateway's
// OpenAPI document (/v1/openapi.json), the dashboard (/ui/, internal/ui)
// and its endpoints, /livez, and o's endpoints.
func (a *API) Handler(conn *grpc.ClientConn, o Options) (http.Handler, error) {
	a.conn, a.o = conn, o
	gw := runtime.NewServeMux(append(GatewayOptions(), runtime.WithMarshalerOption(runtime.MIMEWildcard, &strictJSONPb{runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}}), runtime.WithErrorHandler(a.gatewayError))...)
	bg := context.Background()
	if err := dkvgw.RegisterKVHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterClusterHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterMaintenanceHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterLeaseHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterLockHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterWatchHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterRateLimitHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterQueueHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterQueryHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterAuthHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	if err := dkvgw.RegisterStoreHandler(bg, gw, conn); err != nil {
		return nil, err
	}
	etcdGW, err := etcdGateway(conn)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", gatewayStore(gw))
	mux.Handle("/v3/", gatewayStore(etcdGW))
	mux.HandleFunc("/v1/keys/", a.handleKey)
	mux.HandleFunc("GET /v1/watch", a.handleWatchHTTP)
	mux.HandleFunc("POST /v1/watch", a.handleWatchPost(gw))
	mux.HandleFunc("GET /v1/locks", a.Locks)
	mux.HandleFunc("GET /v1/ratelimits", a.RateLimits)
	mux.HandleFunc("GET /v1/cluster/progress", a.ClusterProgress)
	mux.HandleFunc("GET /v1/cluster/statuses", a.ClusterStatuses)
	mux.HandleFunc("GET /v1/auth/whoami", a.Whoami)
	mux.HandleFunc("GET /v1/openapi.json", serveOpenAPI)
	mux.Handle("/ui/", ui.Handler())
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	o.handleProbes(mux)
	for path, h := range o.Pprof {
		mux.HandleFunc(path, h)
	}
	return a.capBodies(gw, mux), nil
}

// serveOpenAPI serves the gateway's OpenAPI document (api/dkv/v1/openapi).
// It describes the API, not the store, so it needs no token, like /ui/.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, openapi.JSON)
}

// handleProbes serves the node's own endpoints every HTTP listener has:
// /metrics (if set), /livez and /readyz (if set).
func (o Options) handleProbes(mux *http.ServeMux) {
	if o.Metrics != nil {
		mux.Handle("/metrics", o.Metrics)
	}
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	if o.Readyz != nil {
		mux.Handle("/readyz", o.Readyz)
	}
}

// gatewayStore moves an HTTP request's ?store= into the Dkv-Store
// header, which HeaderMatcher passes on as the store metadata; the
// gateway would otherwise take it for a field of the request.
func gatewayStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Has("store") {
			r = r.Clone(r.Context())
			r.Header.Set("Dkv-Store", q.Get("store"))
			q.Del("store")
			r.URL.RawQuery = q.Encode()
		}
		h.ServeHTTP(w, r)
	})
}

// CNMetadata is the gRPC metadata key the gateway passes the HTTP
// client's verified certificate CN in; ClientAddrMetadata the one it
// passes the client's address in (the source a login is throttled by).
// No HTTP header can set either (HeaderMatcher).
const (
	CNMetadata         = "dkv-gateway-client-cn"
	ClientAddrMetadata = "dkv-gateway-client-addr"
)

// verifiedLeaf is the verified client certificate of a TLS connection.
func verifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// GatewayOptions make a gateway pass the HTTP client's verified
// certificate CN and address on to the gRPC handlers, and nothing else
// in their place.
func GatewayOptions() []runtime.ServeMuxOption {
	return []runtime.ServeMuxOption{runtime.WithIncomingHeaderMatcher(HeaderMatcher), runtime.WithMetadata(gatewayClientCN)}
}

// gatewayClientCN passes the HTTP client's verified CN, and its address
// (the source a login is throttled by), to the gRPC handler
// the gateway calls.
func gatewayClientCN(_ context.Context, r *http.Request) metadata.MD {
	md := metadata.Pairs(ClientAddrMetadata, r.RemoteAddr)
	if leaf := verifiedLeaf(r.TLS); leaf != nil && leaf.Subject.CommonName != "" {
		md.Set(CNMetadata, leaf.Subject.CommonName)
	}
	return md
}

// HeaderMatcher is the gateway's default header mapping, except that
// Dkv-Store names the call's store, Dkv-Session carries a write's client
// session (dkvpb.SessionMetadata), and no HTTP header may set
// CNMetadata (only a verified certificate does) or ClientAddrMetadata
// (only the connection).
func HeaderMatcher(key string) (string, bool) {
	switch strings.TrimPrefix(strings.ToLower(key), strings.ToLower(runtime.MetadataHeaderPrefix)) {
	case CNMetadata, ClientAddrMetadata:
		return "", false
	}
	if strings.EqualFold(key, "Dkv-Store") {
		return etcdapi.StoreMetadata, true
	}
	if strings.EqualFold(key, "Dkv-Session") {
		return dkvpb.SessionMetadata, true // a write's client session, as the Go client sends it
	}
	return runtime.DefaultHeaderMatcher(key)
}

// handleKey is the plain-value convenience API: GET returns the raw value
// (404 if absent), PUT stores the request body, DELETE deletes. The key is
// the rest of the path.
func (a *API) handleKey(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/keys/")
	kv := a.n.KV()
	// These calls bypass grpcSrv and its interceptors: map the key into
	// the request's store (?store= or Dkv-Store) and authorize here.
	ctx, store, err := a.n.RequestStore(r)
	if err != nil {
		Error(w, a.n.WireError(err))
		return
	}
	pk, err := store.Key([]byte(name))
	if err != nil {
		Error(w, err)
		return
	}
	key := string(pk)
	check := func(method string, req any) (err error) {
		ctx, err = a.n.Authorize(ctx, method, req)
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
	Error(w, a.n.WireError(err))
}
