package server

import (
	"context"
	"sync"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/server/etcdapi"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
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
		Alarms:      s.etcdAlarms,
		SetAlarm:    s.setAlarm,
		Defragment:  func(context.Context) error { return s.store.Reclaim() },
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

// etcdAlarms is the raised NOSPACE alarms, as etcd lists them.
func (s *Server) etcdAlarms() []*etcdserverpb.AlarmMember {
	ms, err := state.Members(s.store.DB())
	if err != nil {
		return nil
	}
	var out []*etcdserverpb.AlarmMember
	for _, m := range ms {
		if s.sm.Alarms().Raised(m.GetId()) {
			out = append(out, &etcdserverpb.AlarmMember{MemberID: m.GetId(), Alarm: etcdserverpb.AlarmType_NOSPACE})
		}
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
