package server

import (
	"context"
	"errors"
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

// addMember proposes adding a member (a learner if learner), its id
// derived from its name and peer URL, and returns its record once the
// change is applied.
func (s *Server) addMember(ctx context.Context, name, peerURL string, learner bool) (*dkvpb.Member, error) {
	id := MemberID(name, peerURL)
	rec := &dkvpb.Member{Id: id, Name: name, PeerUrl: peerURL, IsLearner: learner}
	ctxData, err := proto.Marshal(&dkvpb.ConfChangeContext{Member: rec})
	if err != nil {
		return nil, err
	}
	typ := raftpb.ConfChangeAddNode
	if learner {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	if err := s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: typ.Enum(), NodeId: new(id), Context: ctxData}); err != nil {
		return nil, err
	}
	return rec, nil
}

// promoteMember proposes making learner m a voter once it has caught up:
// within 10% (and at most 1000 entries) of the leader.
func (s *Server) promoteMember(ctx context.Context, m *dkvpb.Member) error {
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
		return err
	}
	lag := leaderMatch - min(match, leaderMatch)
	if !found || match == 0 || lag > 1000 || float64(match) < 0.9*float64(leaderMatch) {
		return dkverr.New(dkverr.Conflict, "learner %q has not caught up (replicated to index %d, leader at %d); retry when it has", m.GetName(), match, leaderMatch)
	}
	ctxData, _ := proto.Marshal(&dkvpb.ConfChangeContext{Member: &dkvpb.Member{Id: m.GetId(), Name: m.GetName(), PeerUrl: m.GetPeerUrl(), ClientUrl: m.GetClientUrl()}})
	return s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(m.GetId()), Context: ctxData})
}

// removeMember proposes removing m. A voter is removed only if the
// remaining voters that are reachable still form a quorum of the new
// configuration. self reports that this leader removed itself, which
// raft answers by stepping it down.
func (s *Server) removeMember(ctx context.Context, m *dkvpb.Member) (self bool, err error) {
	if !m.GetIsLearner() {
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
			return false, err
		}
		if voters == 0 {
			return false, dkverr.New(dkverr.Conflict, "cannot remove %q: it is the last voter", m.GetName())
		}
		if active < voters/2+1 {
			return false, dkverr.New(dkverr.Conflict, "cannot remove %q: only %d of the remaining %d voters are reachable, fewer than a quorum", m.GetName(), active, voters)
		}
	}
	err = s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(m.GetId())})
	if err != nil && errors.Is(err, raftnode.ErrStopped) && m.GetId() == s.memberID {
		return true, nil
	}
	return false, err
}

// Removed is closed when this member has been removed from the cluster;
// dkv serve exits then.
func (s *Server) Removed() <-chan struct{} { return s.removed }
