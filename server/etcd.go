package server

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server/etcdapi"
	"google.golang.org/grpc"
)

// registerEtcd serves etcd's v3 API (package etcdapi) on the client gRPC
// server, over the same service implementations as DKV's own API: one
// keyspace, one set of leases and watches.
func (s *Server) registerEtcd(gs grpc.ServiceRegistrar, kv *kvService, watch *watchService, lease *leaseService) {
	d := etcdapi.Deps{
		KV: kv, Watch: watch, Lease: lease,
		Header: func() *dkvpb.ResponseHeader { return s.header(0) },
		Unary: func(ctx context.Context, method string, req any, h grpc.UnaryHandler) (any, error) {
			return s.authUnary(ctx, req, method, h)
		},
		Stream: func(srv any, ss grpc.ServerStream, method string, h grpc.StreamHandler) error {
			return s.authStream(srv, ss, method, h)
		},
		HasLeader: func() bool { return s.node.Status().Lead != 0 },
		MaxTxnOps: s.limits.MaxTxnOps,
	}
	etcdapi.Register(gs, d)
	s.registerEtcdMore(gs, d) // etcd_more.go
}
