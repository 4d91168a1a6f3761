package server

import (
	"context"
	"sync"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server/etcdapi"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	electiongw "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb/gw"
	lockgw "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb/gw"
	"google.golang.org/grpc"
)

// registerEtcdMore serves etcd's Cluster, Maintenance and Auth services
// and the v3lock and v3election services (etcdapi.RegisterMore) over
// DKV's own services, with d, the Deps of etcd's KV, Watch and Lease.
func (s *Server) registerEtcdMore(gs grpc.ServiceRegistrar, d etcdapi.Deps) {
	m := etcdapi.MoreDeps{
		Cluster:     &clusterService{s: s},
		Maintenance: &maintenanceService{s: s},
		Auth:        &authService{s: s},
		UpdatePeer:  s.UpdateMemberPeer,
		Alarms:      s.etcdAlarms,
		SetAlarm:    s.setAlarm,
		Defragment: func(ctx context.Context) error {
			_, err := (&maintenanceService{s: s}).Defragment(ctx, &dkvpb.DefragmentRequest{})
			return err
		},
		DBSizeInUse: s.dbInUse,
		Dial:        s.dialSelfOnce(),
		PeerScheme:  "http", ClientScheme: "http",
	}
	if s.cfg.PeerTLS.Enabled() {
		m.PeerScheme = "https"
	}
	if s.cfg.ClientTLS.Enabled() {
		m.ClientScheme = "https"
	}
	etcdapi.RegisterMore(gs, d, m)
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

// etcdGatewayMore are the etcd HTTP/JSON gateway paths of the services
// RegisterMore serves (/v3/cluster/member/list, /v3/maintenance/status,
// /v3/auth/..., /v3/lock/lock, /v3/election/campaign, ...); etcdGateway
// registers them next to KV's, Watch's and Lease's.
var etcdGatewayMore = []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
	gw.RegisterClusterHandler, gw.RegisterMaintenanceHandler, gw.RegisterAuthHandler,
	lockgw.RegisterLockHandler, electiongw.RegisterElectionHandler,
}
