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
// Files: etcdapi.go (Deps, Register, the call path), header.go
// (toHeader), errors.go (toEtcdErr, DKVCode), kv.go and txn.go (KV),
// watch.go (Watch), lease.go (Lease), cluster.go (Cluster),
// maintenance.go (Maintenance), auth.go (Auth), self.go (the connection
// back to this server), lock.go (v3lock) and election.go (v3election).
package etcdapi

import (
	"context"
	"errors"
	"io"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Deps is what the etcd services need from the server.
type Deps struct {
	// KV, Watch, Lease, Cluster, Maintenance and Auth are the server's
	// own service implementations, called in process (no extra hop, no
	// re-encoding), each authorized through Unary as the DKV call the
	// etcd call becomes.
	KV          dkvpb.KVServer
	Watch       dkvpb.WatchServer
	Lease       dkvpb.LeaseServer
	Cluster     dkvpb.ClusterServer
	Maintenance dkvpb.MaintenanceServer
	Auth        dkvpb.AuthServer

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

	// UpdatePeer moves member id to peerURL (host:port) through raft;
	// the member keeps its id. It returns the header and the members
	// after the change.
	UpdatePeer func(ctx context.Context, id uint64, peerURL string) (*dkvpb.ResponseHeader, []*dkvpb.Member, error)

	// Alarms lists the raised alarms, every member's.
	Alarms func() []*etcdserverpb.AlarmMember
	// SetAlarm raises (active) or clears member's NOSPACE alarm through
	// raft.
	SetAlarm func(ctx context.Context, member uint64, active bool) error
	// Defragment gives back to the file system the space deleted and
	// compacted data take on this member.
	Defragment func(ctx context.Context) error
	// DBSizeInUse is the part of the database's size that live data
	// takes; nil: the whole db size.
	DBSizeInUse func() int64
	// EtcdSnapshot writes this member's replicated state, at one point,
	// as an etcd snapshot database (bbolt, etcd's schema) and returns it
	// to read, with its size; Close releases it. nil: Snapshot streams
	// DKV's own snapshot (a tar of a Pebble checkpoint).
	EtcdSnapshot func(ctx context.Context) (io.ReadCloser, int64, error)

	// Dial opens a connection to this server's own gRPC services, for
	// the lock and election services, which are etcd clients of its own
	// KV, Watch and Lease (as etcd's are). It is called at the first
	// lock or election call (the server is not serving yet when they
	// register).
	Dial func(ctx context.Context) (*grpc.ClientConn, error)

	// PeerScheme and ClientScheme are the URL schemes members' URLs are
	// shown with ("http" or "https"; "": "http"); DKV's member table
	// stores host:port.
	PeerScheme, ClientScheme string
}

// Register registers etcd's KV, Watch, Lease, Cluster, Maintenance and
// Auth services and the v3lock and v3election services on gs, served
// through d. The server calls it next to registering DKV's own services.
func Register(gs grpc.ServiceRegistrar, d Deps) {
	if d.MaxTxnOps <= 0 {
		d.MaxTxnOps = defaultMaxTxnOps
	}
	if d.PeerScheme == "" {
		d.PeerScheme = "http"
	}
	if d.ClientScheme == "" {
		d.ClientScheme = "http"
	}
	self := &selfConn{dial: d.Dial}
	etcdserverpb.RegisterKVServer(gs, &kvServer{d: d})
	etcdserverpb.RegisterWatchServer(gs, &watchServer{d: d})
	etcdserverpb.RegisterLeaseServer(gs, &leaseServer{d: d})
	etcdserverpb.RegisterClusterServer(gs, &clusterServer{d: d})
	etcdserverpb.RegisterMaintenanceServer(gs, &maintenanceServer{d: d})
	etcdserverpb.RegisterAuthServer(gs, &authServer{d: d})
	v3lockpb.RegisterLockServer(gs, &lockServer{c: self})
	v3electionpb.RegisterElectionServer(gs, &electionServer{c: self})
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

// call runs one DKV call for an etcd handler: refused at once when the
// caller requires a leader and there is none, otherwise authorized as
// method, with the result typed. It is every handler's one way to a DKV
// service. The error is DKV's as it came, for the handler to map onto
// etcd's (dkvErr for its code, then toEtcdErr); unary does only the
// latter.
func call[R any](ctx context.Context, d Deps, method string, req any, fn func(context.Context) (R, error)) (R, error) {
	var zero R
	if err := d.requireLeader(ctx); err != nil {
		return zero, err
	}
	out, err := d.Unary(ctx, method, req, func(ctx context.Context, _ any) (any, error) {
		return fn(ctx)
	})
	if err != nil {
		return zero, err
	}
	return out.(R), nil
}

// unary is call with the error as etcd's (toEtcdErr).
func unary[R any](ctx context.Context, d Deps, method string, req any, fn func(context.Context) (R, error)) (R, error) {
	out, err := call(ctx, d, method, req, fn)
	return out, toEtcdErr(err)
}

// dkvErr is err as DKV's error (a *dkverr.Error or a gRPC status carrying
// one), if it is one.
func dkvErr(err error) (*dkverr.Error, bool) {
	var de *dkverr.Error
	ok := errors.As(dkverr.FromGRPC(err), &de)
	return de, ok
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
