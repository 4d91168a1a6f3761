package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// EtcdClientOptions are what the client port serves over HTTP besides
// etcd's gateway.
type EtcdClientOptions struct {
	// Options carries the request limits and /metrics and /readyz.
	Options
	// ServerVersion and ClusterVersion are /version's etcdserver and
	// etcdcluster: the etcd version whose API DKV serves.
	ServerVersion, ClusterVersion string
	// DKVVersion is this member's own version, /version's "dkv".
	DKVVersion string
	// Health answers /health: "" when the member is healthy, else why
	// not, in etcd's words ("RAFT NO LEADER", "ALARM NOSPACE", ...).
	Health func(ctx context.Context) string
}

// healthTimeout bounds /health's linearizable check, as etcd's.
const healthTimeout = time.Second

// EtcdClientHandler is what etcd serves over HTTP on its client URL,
// where it multiplexes HTTP/1.1 with gRPC on one listener, and so what
// clients configured with only that URL expect there (Patroni reads
// /version before anything else; etcdctl check datascale reads
// /metrics): etcd's JSON gateway under /v3/ and under /v3beta/ (etcd
// 3.4's name for it, which clients of older clusters use), /version,
// /health, /metrics, /livez and /readyz. Anything else is answered 404
// with where DKV's own HTTP API is: the HTTP port (--http-addr).
func (a *API) EtcdClientHandler(conn *grpc.ClientConn, o EtcdClientOptions) (http.Handler, error) {
	a.conn, a.o = conn, o.Options
	gw, err := etcdGateway(conn)
	if err != nil {
		return nil, err
	}
	v3 := gatewayStore(gw)
	mux := http.NewServeMux()
	mux.Handle("/v3/", v3)
	mux.Handle("/v3beta/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
		r2.URL.RawPath = ""
		v3.ServeHTTP(w, r2)
	}))
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{
			"etcdserver": o.ServerVersion, "etcdcluster": o.ClusterVersion, "dkv": o.DKVVersion,
		})
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		reason := o.Health(ctx)
		st := http.StatusOK
		if reason != "" {
			st = http.StatusServiceUnavailable
		}
		writeJSON(w, st, map[string]string{"health": fmt.Sprint(reason == ""), "reason": reason})
	})
	o.handleProbes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "dkv: the client port serves gRPC and, over HTTP, etcd's endpoints (/v3/, /v3beta/, /version, /health, /metrics, /livez, /readyz); DKV's HTTP API (/v1/) and the dashboard are on the HTTP port (--http-addr)", http.StatusNotFound)
	})
	return a.capBodies(gw, mux), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
