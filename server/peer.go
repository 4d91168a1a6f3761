package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/transport"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// startPeerServer binds the peer address and serves the transport on it.
func (s *Server) startPeerServer() error {
	lis, err := net.Listen("tcp", s.cfg.PeerAddr)
	if err != nil {
		return fmt.Errorf("peer listener on %s: %w", s.cfg.PeerAddr, err)
	}
	s.peerLis = lis
	opts := peerGRPCOptions()
	if s.tls != nil && s.tls.peerServer != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.peerServer)))
	}
	s.peerSrv = grpc.NewServer(opts...)
	s.transport.Register(s.peerSrv)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.peerSrv.Serve(s.limitListen(lis, newConnLimit(maxPeerConnections), "peer"))
	}()
	return nil
}

// PeerAddr is the bound peer address ("" without a listener).
func (s *Server) PeerAddr() string {
	if s.peerLis == nil {
		return ""
	}
	return s.peerLis.Addr().String()
}

// syncPeers points the transport at the members in the member table. It
// runs after every applied membership change.
func (s *Server) syncPeers() {
	if s.transport == nil {
		return
	}
	ms, err := s.sm.Latest().Members()
	if err != nil || len(ms) == 0 {
		return
	}
	self := false
	for _, m := range ms {
		self = self || m.GetId() == s.memberID
	}
	if !self {
		s.removedOnce.Do(func() {
			s.log.Warn("this member was removed from the cluster; it no longer takes part", "member_id", fmt.Sprint(s.memberID))
			close(s.removed)
		})
	}
	known := s.transport.Peers()
	want := map[uint64]bool{}
	for _, m := range ms {
		want[m.GetId()] = true
		s.transport.AddPeer(m.GetId(), m.GetPeerUrl())
	}
	for id := range known {
		if !want[id] {
			s.transport.RemovePeer(id)
		}
	}
}

// ReachableVoters lists the voters the leader has heard from recently,
// itself included (nil on a follower).
func (s *Server) ReachableVoters(ctx context.Context) ([]uint64, error) {
	var ids []uint64
	err := s.node.Inspect(ctx, func(rn *raft.RawNode) {
		if rn.BasicStatus().RaftState != raft.StateLeader {
			return
		}
		rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if !pr.IsLearner && (pr.RecentActive || id == s.memberID) {
				ids = append(ids, id)
			}
		})
	})
	return ids, err
}

// contactTable records when a raft message last arrived from each member:
// the answering member's evidence for MemberList's reachability.
type contactTable struct {
	mu   sync.Mutex
	last map[uint64]time.Time
}

func (t *contactTable) saw(id uint64) {
	now := time.Now()
	t.mu.Lock()
	if t.last == nil {
		t.last = map[uint64]time.Time{}
	}
	t.last[id] = now
	t.mu.Unlock()
}

func (t *contactTable) get(id uint64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.last[id]
	return at, ok
}

// contactRecorder is the transport's view of the raft node: it notes the
// sender of every message the transport admits, then steps it.
type contactRecorder struct {
	transport.Raft
	t *contactTable
}

func (r contactRecorder) Step(ctx context.Context, m *raftpb.Message) error {
	r.t.saw(m.GetFrom())
	return r.Raft.Step(ctx, m)
}

// withReachability returns copies of ms with each member's reachability
// as this member sees it: reachable if a raft message arrived from it
// within an election timeout; unreachable if silent for longer while one
// of the two leads (the leader hears from every member at each heartbeat,
// and every member hears from the leader); unknown between two followers,
// which exchange no messages.
func (s *Server) withReachability(ms []*dkvpb.Member) []*dkvpb.Member {
	st := s.node.Status()
	timeout := s.cfg.TickInterval * time.Duration(s.cfg.ElectionTicks)
	now := time.Now()
	out := make([]*dkvpb.Member, 0, len(ms))
	for _, m := range ms {
		m = proto.Clone(m).(*dkvpb.Member)
		r := &dkvpb.Reachability{LastContactMs: -1}
		if m.GetId() == s.memberID {
			r.State, r.LastContactMs = dkvpb.Reachability_STATE_SELF, 0
		} else {
			at, ok := s.contacts.get(m.GetId())
			if ok {
				r.LastContactMs = now.Sub(at).Milliseconds()
			}
			switch {
			case ok && now.Sub(at) <= timeout:
				r.State = dkvpb.Reachability_STATE_REACHABLE
			case st.IsLeader || (st.Lead != 0 && m.GetId() == st.Lead):
				r.State = dkvpb.Reachability_STATE_UNREACHABLE
			default:
				r.State = dkvpb.Reachability_STATE_UNKNOWN
			}
		}
		m.Reachability = r
		out = append(out, m)
	}
	return out
}
