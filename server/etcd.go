package server

import (
	"context"
	"sync"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server/etcdapi"
	"github.com/dkv-io/dkv/server/grpcapi"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// registerEtcd serves etcd's v3 API (package etcdapi) on the client gRPC
// server, over the same service implementations as DKV's own API: one
// keyspace, one set of leases and watches, members, alarms and users.
func (s *Server) registerEtcd(gs grpc.ServiceRegistrar, api *grpcapi.API) {
	maintenance := api.Maintenance()
	d := etcdapi.Deps{
		KV: api.KV(), Watch: api.Watch(), Lease: api.Lease(),
		Cluster:     api.Cluster(),
		Maintenance: maintenance,
		Auth:        api.Auth(),
		Header:      func() *dkvpb.ResponseHeader { return s.header(0) },
		Unary: func(ctx context.Context, method string, req any, h grpc.UnaryHandler) (any, error) {
			return s.authUnary(ctx, req, method, h)
		},
		Stream: func(srv any, ss grpc.ServerStream, method string, h grpc.StreamHandler) error {
			return s.authStream(srv, ss, method, h)
		},
		HasLeader:  func() bool { return s.node.Status().Lead != 0 },
		MaxTxnOps:  s.limits.MaxTxnOps,
		UpdatePeer: s.UpdateMemberPeer,
		Alarms:     s.etcdAlarms,
		SetAlarm:   s.setAlarm,
		Defragment: func(ctx context.Context) error {
			_, err := maintenance.Defragment(ctx, &dkvpb.DefragmentRequest{})
			return err
		},
		DBSizeInUse:  s.dbInUse,
		EtcdSnapshot: s.etcdSnapshot,
		Dial:         s.dialSelfOnce(),
		PeerScheme:   "http", ClientScheme: "http",
	}
	if s.cfg.PeerTLS.Enabled() {
		d.PeerScheme = "https"
	}
	if s.cfg.ClientTLS.Enabled() {
		d.ClientScheme = "https"
	}
	etcdapi.Register(gs, d)
}

// etcdAlarms is the raised alarms (NOSPACE and CORRUPT), as etcd lists
// them.
func (s *Server) etcdAlarms() []*etcdserverpb.AlarmMember {
	var out []*etcdserverpb.AlarmMember
	for _, a := range s.sm.Alarms().List() {
		t := etcdserverpb.AlarmType_NOSPACE
		if a.GetAlarm() == dkvpb.AlarmType_ALARM_TYPE_CORRUPT {
			t = etcdserverpb.AlarmType_CORRUPT
		}
		out = append(out, &etcdserverpb.AlarmMember{MemberID: a.GetMemberId(), Alarm: t})
	}
	return out
}

// setAlarm raises or clears member's NOSPACE alarm through raft, as the
// member's own space check does.
func (s *Server) setAlarm(ctx context.Context, member uint64, active bool) error {
	reason := ""
	if active {
		reason = "raised through etcd's Alarm API"
	}
	res, err := s.proposeRequest(ctx, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{
		MemberId: member, Active: active, Reason: reason,
	}}})
	if err != nil {
		return err
	}
	return res.Err
}

// dialSelfOnce is a dialer of one in-process connection to this server,
// closed when the server stops.
func (s *Server) dialSelfOnce() func(context.Context) (*grpc.ClientConn, error) {
	var once sync.Once
	var conn *grpc.ClientConn
	var err error
	return func(ctx context.Context) (*grpc.ClientConn, error) {
		once.Do(func() {
			conn, err = s.DialInProcess(ctx)
			if err == nil {
				go func() { <-s.stopc; conn.Close() }()
			}
		})
		return conn, err
	}
}
