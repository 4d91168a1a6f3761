package etcdapi

import (
	"context"
	"errors"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
)

// MoreDeps is what etcd's Cluster, Maintenance, Auth, v3lock and
// v3election services need beyond Deps: DKV's own Cluster, Maintenance
// and Auth services (called in process, authorized through Deps.Unary
// as the DKV call each etcd call becomes), the alarm table, and a
// connection back to this server for the lock and election services,
// which are etcd clients of its own KV, Watch and Lease (as etcd's are).
type MoreDeps struct {
	Cluster     dkvpb.ClusterServer
	Maintenance dkvpb.MaintenanceServer
	Auth        dkvpb.AuthServer

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

	// Dial opens a connection to this server's own gRPC services, for
	// the lock and election services. It is called at the first lock or
	// election call (the server is not serving yet when they register).
	Dial func(ctx context.Context) (*grpc.ClientConn, error)

	// Scheme is the URL scheme members' URLs are shown with ("http" or
	// "https"); DKV's member table stores host:port.
	PeerScheme, ClientScheme string
}

// RegisterMore registers etcd's Cluster, Maintenance and Auth services
// and the v3lock and v3election services on gs, next to Register's.
func RegisterMore(gs grpc.ServiceRegistrar, d Deps, m MoreDeps) {
	if m.PeerScheme == "" {
		m.PeerScheme = "http"
	}
	if m.ClientScheme == "" {
		m.ClientScheme = "http"
	}
	self := &selfConn{dial: m.Dial}
	etcdserverpb.RegisterClusterServer(gs, &clusterServer{d: d, m: m})
	etcdserverpb.RegisterMaintenanceServer(gs, &maintenanceServer{d: d, m: m})
	etcdserverpb.RegisterAuthServer(gs, &authServer{d: d, m: m})
	v3lockpb.RegisterLockServer(gs, &lockServer{c: self})
	v3electionpb.RegisterElectionServer(gs, &electionServer{c: self})
}

// call runs one DKV call for an etcd handler, authorized as method, and
// returns DKV's error untranslated (as a *dkverr.Error where it carries
// one), for the handler to map onto etcd's errors before toEtcdErr.
func call[R any](ctx context.Context, d Deps, method string, req any, fn func(context.Context) (R, error)) (R, error) {
	var zero R
	if err := d.requireLeader(ctx); err != nil {
		return zero, err
	}
	out, err := d.Unary(ctx, method, req, func(ctx context.Context, _ any) (any, error) {
		return fn(ctx)
	})
	if err != nil {
		var de *dkverr.Error
		if errors.As(dkverr.FromGRPC(err), &de) {
			return zero, de
		}
		return zero, err
	}
	return out.(R), nil
}

// dkvErr is err as DKV's error, if it carries one.
func dkvErr(err error) (*dkverr.Error, bool) {
	var de *dkverr.Error
	ok := errors.As(err, &de)
	return de, ok
}
