package grpcapi

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storekeys"
	"github.com/dkv-io/dkv/internal/watch"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Node is what the services need from the node serving them.
type Node interface {
	// Propose validates req as its command's row in the registry
	// (package state) says, refuses it if the NOSPACE alarm would,
	// replicates it, waits for it to be applied here and returns the
	// response with its header completed. A refusal by the state machine
	// is returned as its error.
	Propose(ctx context.Context, req *dkvpb.InternalRequest) (Response, error)

	// WaitLinearizable returns once this member has applied every write
	// acknowledged before the call.
	WaitLinearizable(ctx context.Context) error
	// Applied reads the applied state.
	Applied() state.Reader
	// Header is a response header at revision rev (0: the revision
	// applied so far); CompleteHeader fills in h the same way, keeping
	// the revision it carries, and returns it.
	Header(rev int64) *dkvpb.ResponseHeader
	CompleteHeader(h *dkvpb.ResponseHeader) *dkvpb.ResponseHeader

	// Authorize checks that ctx's caller may make the DKV call method
	// with req, as the gRPC interceptors would, and returns ctx carrying
	// the caller. Recheck checks req again if the auth state changed
	// since: after a linearizable wait, the view may have been behind
	// the cluster.
	Authorize(ctx context.Context, method string, req any) (context.Context, error)
	Recheck(ctx context.Context, req any) error
	// RecheckCaller is Recheck that also returns the auth view and the
	// caller it checked (nil with auth disabled).
	RecheckCaller(ctx context.Context, req any) (*auth.View, *auth.User, error)
	// StoreOf is the key Mapper of the store ctx's call names (the
	// dkv-store metadata); a named store must exist.
	StoreOf(ctx context.Context) (storekeys.Mapper, error)

	// Renew renews lease ids for ctx's caller and returns each one's TTL
	// in ms (0: not found) once the renewal is applied on this member;
	// keep-alives waiting at the same moment share one proposal.
	Renew(ctx context.Context, ids []int64) ([]int64, error)
	// LeaseRemaining is how long lease id has left, if this member
	// tracks it (the leader's lessor).
	LeaseRemaining(id int64) (time.Duration, bool)
	// WaitGrant registers a wait for owner's grant of the lock on key,
	// before the Acquire is proposed: the channel receives the handle
	// once this member applies the grant. The func unregisters it.
	WaitGrant(key []byte, owner string) (<-chan *dkvpb.LockHandle, func())
	// CancelLockWait takes a waiter that gave up out of its queue (or
	// releases the lock if it was granted meanwhile), in the background:
	// the cancel outlives the call that gave up.
	CancelLockWait(key []byte, owner string)

	// WatchStream opens a stream on the node's watch hub, which the
	// apply path publishes every committed event to.
	WatchStream() *watch.Stream
	// WatchRecvStarted counts a Watch stream's receive goroutine, which
	// creates watches (reading the store) and can outlive its handler:
	// the node waits for it before closing the store. Call the returned
	// func when the goroutine ends.
	WatchRecvStarted() func()
	// AuthView is the replicated auth state now: a stream checks its
	// caller again when it changes.
	AuthView() *auth.View
	// HasLeader reports whether this member knows a leader.
	HasLeader() bool
	// CorruptRefusal is the Unavailable error naming the CORRUPT alarm
	// when this member's state diverged, or nil: a stream then sends
	// nothing more.
	CorruptRefusal() error

	// Stopping is closed when the member starts shutting down: streams
	// and waits end with Unavailable, so clients move to another member.
	Stopping() <-chan struct{}
}

// Options are the node's settings the services follow.
type Options struct {
	// Limits are the request limits (key and value sizes, txn ops).
	Limits mvcc.Limits
	// UnsafeLocalReads serves linearizable reads without waiting, a
	// deliberately broken mode (server.Config).
	UnsafeLocalReads bool
	// MaxReplyBytes is the largest gRPC message the server sends: a
	// range or query reply over it is refused with a message that says
	// how to page.
	MaxReplyBytes int
	// RequestTimeout bounds a waiting Acquire's enqueue, an ordinary
	// proposal (the wait for the grant lasts as long as the caller's
	// context).
	RequestTimeout time.Duration
	// MemberName names this member in a stream's Unavailable errors.
	MemberName string
	// LeaderGrace is how long a watch stream stays open on a member
	// without a leader before it ends with Unavailable.
	LeaderGrace time.Duration
	// Version is the server's version, which Status and snapshots
	// report.
	Version string
	// QuotaBytes is the database quota (server.Config.QuotaBytes),
	// which Status reports, 0 if not positive.
	QuotaBytes int64
	// AuthBcryptCost is the bcrypt cost of the password hashes the Auth
	// service makes.
	AuthBcryptCost int
	// AuthTokenTTL is how long a token Authenticate issues lasts.
	AuthTokenTTL time.Duration
}

// Response is a command's response: it has a header.
type Response interface {
	proto.Message
	GetHeader() *dkvpb.ResponseHeader
}

// API is the services over one Node.
type API struct {
	n Node
	m Admin
	o Options
}

// New is the services over n, the node's operations on itself being m.
func New(n Node, m Admin, o Options) *API { return &API{n: n, m: m, o: o} }

// Lease is the Lease service, for etcd's Lease and tests.
func (a *API) Lease() dkvpb.LeaseServer { return &leaseService{n: a.n} }

// Watch is the Watch service, for etcd's Watch.
func (a *API) Watch() dkvpb.WatchServer { return &watchService{a: a} }

// KV is the KV service, for callers in the node's process (the HTTP
// gateway's plain-value endpoint, etcd's KV, auto-compaction).
func (a *API) KV() dkvpb.KVServer { return &kvService{a: a} }

// Cluster is the Cluster service, for etcd's Cluster and the HTTP
// cluster status.
func (a *API) Cluster() dkvpb.ClusterServer { return &clusterService{a: a} }

// Maintenance is the Maintenance service, for etcd's Maintenance.
func (a *API) Maintenance() dkvpb.MaintenanceServer { return &maintenanceService{a: a} }

// Auth is the Auth service, for etcd's Auth.
func (a *API) Auth() dkvpb.AuthServer { return &authService{a: a} }

// Register registers the services on gs.
func (a *API) Register(gs grpc.ServiceRegistrar) {
	dkvpb.RegisterKVServer(gs, a.KV())
	dkvpb.RegisterQueryServer(gs, &queryService{a: a})
	dkvpb.RegisterLeaseServer(gs, a.Lease())
	dkvpb.RegisterLockServer(gs, &lockService{a: a})
	dkvpb.RegisterWatchServer(gs, a.Watch())
	dkvpb.RegisterStoreServer(gs, &storeService{n: a.n})
	dkvpb.RegisterRateLimitServer(gs, &rateLimitService{n: a.n})
	dkvpb.RegisterQueueServer(gs, &queueService{n: a.n})
	dkvpb.RegisterClusterServer(gs, a.Cluster())
	dkvpb.RegisterMaintenanceServer(gs, a.Maintenance())
	dkvpb.RegisterAuthServer(gs, a.Auth())
}

// Propose is Node.Propose with the response of the type the command
// answers with: the one typed propose-and-respond path, which the node's
// own loops (lease expiry, keep-alives) use too.
func Propose[T Response](ctx context.Context, n Node, req *dkvpb.InternalRequest) (T, error) {
	var zero T
	r, err := n.Propose(ctx, req)
	if err != nil {
		return zero, err
	}
	resp, ok := r.(T)
	if !ok {
		return zero, dkverr.New(dkverr.Internal, "unexpected response %T", r)
	}
	return resp, nil
}
