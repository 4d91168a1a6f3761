// Package etcdapi serves etcd's v3 gRPC API (package etcdserverpb of
// go.etcd.io/etcd/api/v3) over DKV's own services, so etcdctl, clientv3
// and every other etcd client work against a DKV node unchanged.
//
// It holds no state of its own. Each etcd service type translates etcd
// messages to DKV's (api/dkv/v1), calls DKV's in-process service
// implementation, and translates the reply and its header back; errors
// become etcd's (toEtcdErr). There is one keyspace: a key, its revision,
// version and lease, a watch, a lease are the same through either API.
//
// Authorization runs here, per translated DKV request, through
// Deps.Unary and Deps.Stream, which are the server's auth interceptor: an
// etcd call needs exactly the permissions of the DKV call it becomes. The
// server's own interceptors therefore let etcd method names through
// unchecked (IsEtcdMethod), and every handler in this package must go
// through Unary or Stream before calling a DKV service.
//
// Files: etcdapi.go (Deps, Register), header.go (toHeader), errors.go
// (toEtcdErr), kv.go and txn.go (KV), watch.go (Watch), lease.go (Lease).
package etcdapi

import (
	"context"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Deps is what the etcd services need from the server.
type Deps struct {
	// KV, Watch and Lease are the server's own service implementations,
	// called in process (no extra hop, no re-encoding).
	KV    dkvpb.KVServer
	Watch dkvpb.WatchServer
	Lease dkvpb.LeaseServer

	// Header is a response header at the revision applied so far, for
	// replies DKV's services give without one.
	Header func() *dkvpb.ResponseHeader

	// Unary authorizes the DKV request req as if it were a call of the
	// DKV method (its full gRPC name, e.g. dkvpb.KV_Put_FullMethodName)
	// with ctx's credentials, then runs h with the context carrying the
	// caller and filters the reply as the server's interceptor does.
	Unary func(ctx context.Context, method string, req any, h grpc.UnaryHandler) (any, error)
	// Stream authorizes opening a stream as the DKV streaming method and
	// runs h.
	Stream func(srv any, ss grpc.ServerStream, method string, h grpc.StreamHandler) error

	// HasLeader reports whether this member knows a leader. A call that
	// carries etcd's "hasleader" metadata (clientv3.WithRequireLeader,
	// which etcdctl watch uses) is refused with etcd's no-leader error at
	// once when it does not, as etcd refuses it.
	HasLeader func() bool

	// MaxTxnOps is the most ops a txn may hold, counted as etcd counts
	// them (every op of each branch of every nested txn); 0: etcd's
	// default, 128.
	MaxTxnOps int
}

// Register registers etcd's KV, Watch and Lease services on gs, served
// through d. The server calls it next to registering DKV's own services.
func Register(gs grpc.ServiceRegistrar, d Deps) {
	if d.MaxTxnOps <= 0 {
		d.MaxTxnOps = defaultMaxTxnOps
	}
	etcdserverpb.RegisterKVServer(gs, &kvServer{d: d})
	etcdserverpb.RegisterWatchServer(gs, &watchServer{d: d})
	etcdserverpb.RegisterLeaseServer(gs, &leaseServer{d: d})
}

// defaultMaxTxnOps is etcd's --max-txn-ops default.
const defaultMaxTxnOps = 128

// IsEtcdMethod reports whether a full gRPC method name is one of etcd's
// (served by this package, which authorizes it itself).
func IsEtcdMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/etcdserverpb.") ||
		strings.HasPrefix(fullMethod, "/v3lockpb.") ||
		strings.HasPrefix(fullMethod, "/v3electionpb.")
}

// unary runs one DKV call for an etcd handler: authorized as method,
// with the result typed.
func unary[R any](ctx context.Context, d Deps, method string, req any, call func(context.Context) (R, error)) (R, error) {
	if err := d.requireLeader(ctx); err != nil {
		var zero R
		return zero, err
	}
	out, err := d.Unary(ctx, method, req, func(ctx context.Context, _ any) (any, error) {
		return call(ctx)
	})
	if err != nil {
		var zero R
		return zero, toEtcdErr(err)
	}
	return out.(R), nil
}

// requireLeader refuses a call that requires a leader (etcd's metadata
// "hasleader" = "true") while this member knows none.
func (d Deps) requireLeader(ctx context.Context) error {
	if d.HasLeader == nil || d.HasLeader() {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(rpctypes.MetadataRequireLeaderKey) {
		if v == rpctypes.MetadataHasLeader {
			return rpctypes.ErrGRPCNoLeader
		}
	}
	return nil
}
