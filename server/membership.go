package server

import (
	"context"
	"errors"
	"net"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/raftnode"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The membership calls need leader-only knowledge (progress, who is
// active); a follower forwards them to the leader's client URL.
func (s *Server) leaderClient(ctx context.Context) (dkvpb.ClusterClient, func(), error) {
	conn, err := s.leaderConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	return dkvpb.NewClusterClient(conn), func() { conn.Close() }, nil
}

// leaderConn is a connection to the leader's client URL that passes the
// caller's credentials on.
func (s *Server) leaderConn(ctx context.Context) (*grpc.ClientConn, error) {
	// Right after a cluster forms, the leader may not have published its
	// client URL yet: poll the member table until it has, or ctx ends.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if lead := s.node.Status().Lead; lead != 0 {
			ms, err := s.applied().Latest().Members()
			if err != nil {
				return nil, err
			}
			for _, m := range ms {
				if m.GetId() == lead && m.GetClientUrl() != "" {
					return grpc.NewClient("passthrough:///"+m.GetClientUrl(), s.memberDialCreds(),
						grpc.WithUnaryInterceptor(forwardCredentials))
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, dkverr.New(dkverr.Unavailable, "no leader with a known client URL before the deadline")
		}
	}
}

// findMember looks name up in the member table after a linearizable wait,
// so a change acknowledged anywhere is visible here.
// onLeader runs a membership call on the leader, for a follower that got
// it: those calls need leader-only knowledge (progress, who is active).
func onLeader[T any](ctx context.Context, s *Server, call func(dkvpb.ClusterClient) (T, error)) (T, error) {
	lc, closeFn, err := s.leaderClient(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer closeFn()
	return call(lc)
}

func (s *Server) findMember(ctx context.Context, name string) (*dkvpb.Member, []*dkvpb.Member, error) {
	if err := s.node.WaitLinearizable(ctx); err != nil {
		return nil, nil, err
	}
	// Member changes and leader transfer are root's: check again against
	// the auth state the wait may have brought.
	if _, err := s.recheck(ctx, &dkvpb.MemberRemoveRequest{}); err != nil {
		return nil, nil, err
	}
	ms, err := s.applied().Latest().Members()
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

func (s *Server) membersResp() ([]*dkvpb.Member, error) {
	return s.applied().Latest().Members()
}

func (c *clusterService) MemberAdd(ctx context.Context, req *dkvpb.MemberAddRequest) (*dkvpb.MemberAddResponse, error) {
	s := c.s
	if req.GetName() == "" || req.GetPeerUrl() == "" {
		return nil, dkverr.New(dkverr.InvalidInput, "member add needs a name and a peer URL")
	}
	if _, _, err := net.SplitHostPort(req.GetPeerUrl()); err != nil {
		return nil, dkverr.New(dkverr.InvalidInput, "peer URL %q is not host:port", req.GetPeerUrl())
	}
	if !s.node.Status().IsLeader {
		return onLeader(ctx, s, func(lc dkvpb.ClusterClient) (*dkvpb.MemberAddResponse, error) { return lc.MemberAdd(ctx, req) })
	}
	m, ms, ferr := s.findMember(ctx, req.GetName())
	if c := dkverr.CodeOf(ferr); c == dkverr.Unauthenticated || c == dkverr.PermissionDenied {
		return nil, ferr
	}
	if m != nil {
		return nil, dkverr.New(dkverr.Conflict, "a member named %q already exists", req.GetName())
	} else {
		for _, o := range ms {
			if o.GetPeerUrl() == req.GetPeerUrl() {
				return nil, dkverr.New(dkverr.Conflict, "member %q already uses peer URL %s", o.GetName(), o.GetPeerUrl())
			}
		}
	}
	id := MemberID(req.GetName(), req.GetPeerUrl())
	rec := &dkvpb.Member{Id: id, Name: req.GetName(), PeerUrl: req.GetPeerUrl(), IsLearner: req.GetIsLearner()}
	ctxData, err := proto.Marshal(&dkvpb.ConfChangeContext{Member: rec})
	if err != nil {
		return nil, err
	}
	typ := raftpb.ConfChangeAddNode
	if req.GetIsLearner() {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	if err := s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: typ.Enum(), NodeId: new(id), Context: ctxData}); err != nil {
		return nil, err
	}
	ms, err = s.membersResp()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberAddResponse{Header: s.header(0), Member: rec, Members: ms}, nil
}

func (c *clusterService) MemberPromote(ctx context.Context, req *dkvpb.MemberPromoteRequest) (*dkvpb.MemberPromoteResponse, error) {
	s := c.s
	if !s.node.Status().IsLeader {
		return onLeader(ctx, s, func(lc dkvpb.ClusterClient) (*dkvpb.MemberPromoteResponse, error) { return lc.MemberPromote(ctx, req) })
	}
	m, _, err := s.findMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if !m.GetIsLearner() {
		return nil, dkverr.New(dkverr.Conflict, "member %q is already a voter", req.GetName())
	}
	var match, leaderMatch uint64
	var found bool
	if err := s.node.Inspect(ctx, func(rn *raft.RawNode) {
		rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id == m.GetId() {
				match, found = pr.Match, true
			}
			if id == s.memberID {
				leaderMatch = pr.Match
			}
		})
	}); err != nil {
		return nil, err
	}
	// Caught up: within 10% (and at most 1000 entries) of the leader.
	lag := leaderMatch - min(match, leaderMatch)
	if !found || match == 0 || lag > 1000 || float64(match) < 0.9*float64(leaderMatch) {
		return nil, dkverr.New(dkverr.Conflict, "learner %q has not caught up (replicated to index %d, leader at %d); retry when it has", req.GetName(), match, leaderMatch)
	}
	ctxData, _ := proto.Marshal(&dkvpb.ConfChangeContext{Member: &dkvpb.Member{Id: m.GetId(), Name: m.GetName(), PeerUrl: m.GetPeerUrl(), ClientUrl: m.GetClientUrl()}})
	if err := s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(m.GetId()), Context: ctxData}); err != nil {
		return nil, err
	}
	ms, err := s.membersResp()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberPromoteResponse{Header: s.header(0), Members: ms}, nil
}

func (c *clusterService) MemberRemove(ctx context.Context, req *dkvpb.MemberRemoveRequest) (*dkvpb.MemberRemoveResponse, error) {
	s := c.s
	if !s.node.Status().IsLeader {
		return onLeader(ctx, s, func(lc dkvpb.ClusterClient) (*dkvpb.MemberRemoveResponse, error) { return lc.MemberRemove(ctx, req) })
	}
	m, _, err := s.findMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if !m.GetIsLearner() {
		// The remaining voters that are reachable must still form a
		// quorum of the new configuration.
		voters, active := 0, 0
		if err := s.node.Inspect(ctx, func(rn *raft.RawNode) {
			rn.WithProgress(func(id uint64, typ raft.ProgressType, pr tracker.Progress) {
				if pr.IsLearner || id == m.GetId() {
					return
				}
				voters++
				if pr.RecentActive || id == s.memberID {
					active++
				}
			})
		}); err != nil {
			return nil, err
		}
		if voters == 0 {
			return nil, dkverr.New(dkverr.Conflict, "cannot remove %q: it is the last voter", req.GetName())
		}
		if active < voters/2+1 {
			return nil, dkverr.New(dkverr.Conflict, "cannot remove %q: only %d of the remaining %d voters are reachable, fewer than a quorum", req.GetName(), active, voters)
		}
	}
	if err := s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(m.GetId())}); err != nil {
		if errors.Is(err, raftnode.ErrStopped) && m.GetId() == s.memberID {
			// Removing ourselves: raft stepped this leader down.
			return &dkvpb.MemberRemoveResponse{Header: s.header(0)}, nil
		}
		return nil, err
	}
	ms, err := s.membersResp()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberRemoveResponse{Header: s.header(0), Members: ms}, nil
}

func (c *clusterService) LeaderTransfer(ctx context.Context, req *dkvpb.LeaderTransferRequest) (*dkvpb.LeaderTransferResponse, error) {
	s := c.s
	m, _, err := s.findMember(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if m.GetIsLearner() {
		return nil, dkverr.New(dkverr.InvalidInput, "member %q is a learner; only voters can lead", req.GetName())
	}
	if s.node.Status().Lead == m.GetId() {
		return &dkvpb.LeaderTransferResponse{Header: s.header(0), LeaderId: m.GetId()}, nil
	}
	if !s.node.Status().IsLeader {
		return onLeader(ctx, s, func(lc dkvpb.ClusterClient) (*dkvpb.LeaderTransferResponse, error) {
			return lc.LeaderTransfer(ctx, req)
		})
	}
	if err := s.node.TransferLeadership(ctx, m.GetId()); err != nil {
		return nil, err
	}
	return &dkvpb.LeaderTransferResponse{Header: s.header(0), LeaderId: m.GetId()}, nil
}

// Removed is closed when this member has been removed from the cluster;
// dkv serve exits then.
func (s *Server) Removed() <-chan struct{} { return s.removed }
