package server

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storekeys"
	"github.com/dkv-io/dkv/internal/watch"
	"github.com/dkv-io/dkv/server/grpcapi"
)

// grpcNode is the node as the gRPC services of package grpcapi see it:
// grpcapi.Node, and grpcapi.Admin for the services about the member
// itself.
type grpcNode struct{ s *Server }

var _ grpcapi.Node = grpcNode{}

func (n grpcNode) Propose(ctx context.Context, req *dkvpb.InternalRequest) (grpcapi.Response, error) {
	return n.s.proposeResponse(ctx, req)
}

func (n grpcNode) WaitLinearizable(ctx context.Context) error { return n.s.node.WaitLinearizable(ctx) }

func (n grpcNode) Applied() state.Reader { return n.s.applied() }

func (n grpcNode) Header(rev int64) *dkvpb.ResponseHeader { return n.s.header(rev) }

func (n grpcNode) CompleteHeader(h *dkvpb.ResponseHeader) *dkvpb.ResponseHeader {
	return n.s.completeHeader(h)
}

func (n grpcNode) Authorize(ctx context.Context, method string, req any) (context.Context, error) {
	return n.s.checkCall(ctx, method, req)
}

func (n grpcNode) Recheck(ctx context.Context, req any) error {
	_, err := n.s.recheck(ctx, req)
	return err
}

func (n grpcNode) RecheckCaller(ctx context.Context, req any) (*auth.View, *auth.User, error) {
	return n.s.recheckCaller(ctx, req)
}

func (n grpcNode) Renew(ctx context.Context, ids []int64) ([]int64, error) {
	return n.s.renewer.renew(ctx, ids)
}

func (n grpcNode) LeaseRemaining(id int64) (time.Duration, bool) {
	_, rem, ok := n.s.lessor.Remaining(id)
	return rem, ok
}

func (n grpcNode) WaitGrant(key []byte, owner string) (<-chan *dkvpb.LockHandle, func()) {
	return n.s.lockWait.register(key, owner)
}

func (n grpcNode) CancelLockWait(key []byte, owner string) { n.s.cancelLockWait(key, owner) }

func (n grpcNode) WatchStream() *watch.Stream { return n.s.watchHub.NewStream() }

func (n grpcNode) WatchRecvStarted() func() { return n.s.watchRecvStarted() }

func (n grpcNode) AuthView() *auth.View { return n.s.sm.Auth().View() }

func (n grpcNode) HasLeader() bool { return n.s.node.Status().Lead != 0 }

func (n grpcNode) CorruptRefusal() error { return n.s.corruptRefusal() }

func (n grpcNode) Stopping() <-chan struct{} { return n.s.stopc }

func (n grpcNode) StoreOf(ctx context.Context) (storekeys.Mapper, error) { return n.s.storeOf(ctx) }

// grpcAPI is the gRPC services of package grpcapi over this node.
func (s *Server) grpcAPI() *grpcapi.API {
	return grpcapi.New(grpcNode{s}, grpcNode{s}, grpcapi.Options{
		Limits:           s.limits,
		UnsafeLocalReads: s.cfg.UnsafeLocalReads,
		MaxReplyBytes:    maxSendMsgBytes,
		RequestTimeout:   s.cfg.RequestTimeout,
		MemberName:       s.cfg.Name,
		LeaderGrace:      s.leaderGrace(),
		Version:          Version,
		QuotaBytes:       s.cfg.QuotaBytes,
		AuthBcryptCost:   s.cfg.AuthBcryptCost,
		AuthTokenTTL:     s.cfg.AuthTokenTTL,
	})
}

var _ grpcapi.Admin = grpcNode{}

func (n grpcNode) Status() grpcapi.MemberStatus {
	s := n.s
	st := s.node.Status()
	isLearner := false
	if cs := st.ConfState; cs != nil {
		for _, id := range cs.GetLearners() {
			if id == s.memberID {
				isLearner = true
			}
		}
	}
	return grpcapi.MemberStatus{
		MemberID: s.memberID, ClusterID: s.clusterID,
		Lead: st.Lead, Term: st.Term, Commit: st.Commit, Applied: st.Applied,
		IsLeader: st.IsLeader, IsLearner: isLearner,
	}
}

// Storage reads the MVCC store's counters, as headers do, rather than
// the state's records: they are the revisions the header carries.
func (n grpcNode) Storage() grpcapi.StorageStatus {
	s := n.s
	return grpcapi.StorageStatus{
		Revision: s.kv.Revision(), CompactRevision: s.kv.CompactRevision(),
		DBSize: s.dbSize(), DBInUse: s.dbInUse(),
	}
}

func (n grpcNode) HashKV(rev int64) (*dkvpb.HashKVResponse, error) { return n.s.hashKV(rev) }

func (n grpcNode) WithReachability(ms []*dkvpb.Member) []*dkvpb.Member {
	return n.s.withReachability(ms)
}

func (n grpcNode) LeaderCluster(ctx context.Context) (dkvpb.ClusterClient, func(), error) {
	conn, err := n.s.leaderConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	return dkvpb.NewClusterClient(conn), func() { conn.Close() }, nil
}

func (n grpcNode) AddMember(ctx context.Context, name, peerURL string, learner bool) (*dkvpb.Member, error) {
	return n.s.addMember(ctx, name, peerURL, learner)
}

func (n grpcNode) PromoteMember(ctx context.Context, m *dkvpb.Member) error {
	return n.s.promoteMember(ctx, m)
}

func (n grpcNode) RemoveMember(ctx context.Context, m *dkvpb.Member) (bool, error) {
	return n.s.removeMember(ctx, m)
}

func (n grpcNode) TransferLeader(ctx context.Context, id uint64) error {
	return n.s.node.TransferLeadership(ctx, id)
}

func (n grpcNode) Snapshot() (*grpcapi.Archive, error) { return n.s.snapshot() }

func (n grpcNode) Alarms() []*dkvpb.AlarmMember { return n.s.sm.Alarms().List() }

func (n grpcNode) DisarmAlarm(ctx context.Context, a *dkvpb.AlarmMember) error {
	return n.s.disarmAlarm(ctx, a)
}

func (n grpcNode) Defragment(ctx context.Context) (grpcapi.Defragmented, error) {
	return n.s.defragment(ctx)
}

func (n grpcNode) Login(ctx context.Context, v *auth.View, name, password string) (*auth.User, error) {
	return n.s.login(ctx, v, name, password)
}

func (n grpcNode) ChangeAuth(ctx context.Context, what string, ch *dkvpb.AuthChange) (*dkvpb.AuthResponse, error) {
	return n.s.changeAuth(ctx, what, ch)
}
