package grpcapi

import (
	"context"
	"net"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

// clusterService implements dkvpb.ClusterServer: this member's status
// and hash, and the member table and its changes, which the leader makes
// (a follower forwards them to it).
type clusterService struct {
	dkvpb.UnimplementedClusterServer
	a *API
}

func (c *clusterService) Status(ctx context.Context, _ *dkvpb.StatusRequest) (*dkvpb.StatusResponse, error) {
	m, o := c.a.m, c.a.o
	st := m.Status()
	hdr := c.a.n.Header(0)
	sto := m.Storage()
	return &dkvpb.StatusResponse{
		Header:           hdr,
		Name:             o.MemberName,
		MemberId:         st.MemberID,
		LeaderId:         st.Lead,
		RaftTerm:         st.Term,
		RaftIndex:        st.Commit,
		RaftAppliedIndex: st.Applied,
		Revision:         sto.Revision,
		CompactRevision:  sto.CompactRevision,
		DbSize:           sto.DBSize,
		DbSizeInUse:      sto.DBInUse,
		Alarms:           m.Alarms(),
		IsLearner:        st.IsLearner,
		Version:          o.Version,
		QuotaBytes:       max(o.QuotaBytes, 0),
	}, nil
}

func (c *clusterService) HashKV(ctx context.Context, req *dkvpb.HashKVRequest) (*dkvpb.HashKVResponse, error) {
	if req.GetRevision() < 0 {
		return nil, dkverr.New(dkverr.InvalidInput, "revision %d is negative", req.GetRevision())
	}
	return c.a.m.HashKV(req.GetRevision())
}

func (c *clusterService) MemberList(ctx context.Context, req *dkvpb.MemberListRequest) (*dkvpb.MemberListResponse, error) {
	n := c.a.n
	if req.GetLinearizable() {
		if err := n.WaitLinearizable(ctx); err != nil {
			return nil, err
		}
		if err := n.Recheck(ctx, req); err != nil {
			return nil, err
		}
	}
	ms, err := n.Applied().Latest().Members()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberListResponse{Header: n.Header(0), Members: c.a.m.WithReachability(ms), LeaderId: c.a.m.Status().Lead}, nil
}

// onLeader runs a membership call on the leader, for a follower that got
// it: those calls need leader-only knowledge (progress, who is active).
func onLeader[T any](ctx context.Context, m Admin, call func(dkvpb.ClusterClient) (T, error)) (T, error) {
	lc, closeFn, err := m.LeaderCluster(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer closeFn()
	return call(lc)
}

// findMember looks name up in the member table after a linearizable wait,
// so a change acknowledged anywhere is visible here.
func (c *clusterService) findMember(ctx context.Context, name string) (*dkvpb.Member, []*dkvpb.Member, error) {
	n := c.a.n
	if err := n.WaitLinearizable(ctx); err != nil {
		return nil, nil, err
	}
	// Member changes and leader transfer are root's: check again against
	// the auth state the wait may have brought.
	if err := n.Recheck(ctx, &dkvpb.MemberRemoveRequest{}); err != nil {
		return nil, nil, err
	}
	ms, err := n.Applied().Latest().Members()
	if err != nil {
		return nil, nil, err
	}
	for _, m := range ms {
		if m.GetName() == name {
			return m, ms, nil
		}
	}
	return nil, ms, dkverr.New(dkverr.NotFound, "no member named %q", name)
}

func (c *clusterService) MemberAdd(ctx context.Context, req *dkvpb.MemberAddRequest) (*dkvpb.MemberAddResponse, error) {
	if req.GetName() == "" || req.GetPeerUrl() == "" {
		return nil, dkverr.New(dkverr.InvalidInput, "member add needs a name and a peer URL")
	}
	if _, _, err := net.SplitHostPort(req.GetPeerUrl()); err != nil {
		return nil, dkverr.New(dkverr.InvalidInput, "peer URL %q is not host:port", req.GetPeerUrl())
	}
	if !c.a.m.Status().IsLeader {
		return onLeader(ctx, c.a.m, func(lc dkvpb.ClusterClient) (*dkvpb.MemberAddResponse, error) { return lc.MemberAdd(ctx, req) })
	}
	m, ms, ferr := c.findMember(ctx, req.GetName())
	if c := dkverr.CodeOf(ferr); c == dkverr.Unauthenticated || c == dkverr.PermissionDenied {
		return nil, ferr
	}
	if m != nil {
		return nil, dkverr.New(dkverr.Conflict, "a member named %q already exists", req.GetName())
	}
	for _, o := range ms {
		if o.GetPeerUrl() == req.GetPeerUrl() {
			return nil, dkverr.New(dkverr.Conflict, "member %q already uses peer URL %s", o.GetName(), o.GetPeerUrl())
		}
	}
	rec, err := c.a.m.AddMember(ctx, req.GetName(), req.GetPeerUrl(), req.GetIsLearner())
	if err != nil {
		return nil, err
	}
	ms, err = c.a.n.Applied().Latest().Members()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberAddResponse{Header: c.a.n.Header(0), Member: rec, Members: ms}, nil
}

func (c *clusterService) MemberPromote(ctx context.Context, req *dkvpb.MemberPromoteRequest) (*dkvpb.MemberPromoteResponse, error) {
	if !c.a.m.Status().IsLeader {
		return onLeader(ctx, c.a.m, func(lc dkvpb.ClusterClient) (*dkvpb.MemberPromoteResponse, error) { return lc.MemberPromote(ctx, req) })
	}
	m, _, err := c.findMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if !m.GetIsLearner() {
		return nil, dkverr.New(dkverr.Conflict, "member %q is already a voter", req.GetName())
	}
	if err := c.a.m.PromoteMember(ctx, m); err != nil {
		return nil, err
	}
	ms, err := c.a.n.Applied().Latest().Members()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberPromoteResponse{Header: c.a.n.Header(0), Members: ms}, nil
}

func (c *clusterService) MemberRemove(ctx context.Context, req *dkvpb.MemberRemoveRequest) (*dkvpb.MemberRemoveResponse, error) {
	if !c.a.m.Status().IsLeader {
		return onLeader(ctx, c.a.m, func(lc dkvpb.ClusterClient) (*dkvpb.MemberRemoveResponse, error) { return lc.MemberRemove(ctx, req) })
	}
	m, _, err := c.findMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	self, err := c.a.m.RemoveMember(ctx, m)
	if self {
		return &dkvpb.MemberRemoveResponse{Header: c.a.n.Header(0)}, nil
	}
	if err != nil {
		return nil, err
	}
	ms, err := c.a.n.Applied().Latest().Members()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberRemoveResponse{Header: c.a.n.Header(0), Members: ms}, nil
}

func (c *clusterService) LeaderTransfer(ctx context.Context, req *dkvpb.LeaderTransferRequest) (*dkvpb.LeaderTransferResponse, error) {
	m, _, err := c.findMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if m.GetIsLearner() {
		return nil, dkverr.New(dkverr.InvalidInput, "member %q is a learner; only voters can lead", req.GetName())
	}
	if c.a.m.Status().Lead == m.GetId() {
		return &dkvpb.LeaderTransferResponse{Header: c.a.n.Header(0), LeaderId: m.GetId()}, nil
	}
	if !c.a.m.Status().IsLeader {
		return onLeader(ctx, c.a.m, func(lc dkvpb.ClusterClient) (*dkvpb.LeaderTransferResponse, error) {
			return lc.LeaderTransfer(ctx, req)
		})
	}
	if err := c.a.m.TransferLeader(ctx, m.GetId()); err != nil {
		return nil, err
	}
	return &dkvpb.LeaderTransferResponse{Header: c.a.n.Header(0), LeaderId: m.GetId()}, nil
}
