package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/raftnode"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/transport"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// startPeerServer binds the peer address and serves the transport on it.
func (s *Server) startPeerServer() error {
	lis, err := net.Listen("tcp", s.cfg.PeerAddr)
	if err != nil {
		return fmt.Errorf("peer listener on %s: %w", s.cfg.PeerAddr, err)
	}
	s.peerLis = lis
	s.peerSrv = grpc.NewServer(peerGRPCOptions()...)
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
	ms, err := state.Members(s.store.DB())
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

// publishClientURL records this member's client URL in the member table
// if it is missing or changed, so clients can discover every member.
func (s *Server) publishClientURL() {
	url := s.advClient
	if url == "" {
		return
	}
	ms, err := state.Members(s.store.DB())
	if err != nil {
		return
	}
	for _, m := range ms {
		if m.GetId() == s.memberID && m.GetClientUrl() == url {
			return
		}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_MemberAttrs{MemberAttrs: &dkvpb.MemberAttrsRequest{Id: s.memberID, ClientUrl: url}}}
		if _, err := s.proposeRequest(ctx, req); err != nil {
			s.log.Warn("publish client url", "err", err)
		}
	}()
}

// joinTimeout bounds the attempt to join through one --join endpoint.
const joinTimeout = 15 * time.Second

// joinCluster asks a running member (cfg.Join) to add this node as a
// learner, and learns the cluster id, the members' peer addresses and
// the peer secret. An endpoint that refuses the connection fails at once
// (nothing listens there); one that does not answer fails after
// joinTimeout; ctx (the caller's, e.g. SIGTERM) ends the attempt at any
// point.
func (s *Server) joinCluster(ctx context.Context) (memberID, clusterID uint64, members []*dkvpb.Member, secret []byte, err error) {
	memberID = MemberID(s.cfg.Name, s.advPeer)
	var errs []string
	for _, ep := range s.cfg.Join {
		jctx, cancel := context.WithTimeout(joinContext(ctx, memberID), joinTimeout)
		var hdr metadata.MD
		members, clusterID, err = s.joinVia(jctx, ep, memberID, &hdr)
		expired := jctx.Err() != nil
		cancel()
		if err == nil {
			return memberID, clusterID, members, joinedSecret(hdr), nil
		}
		if ctx.Err() != nil {
			return 0, 0, nil, nil, fmt.Errorf("join via %s: %w", ep, ctx.Err())
		}
		if expired {
			err = fmt.Errorf("no answer within %v: %w", joinTimeout, err)
		}
		errs = append(errs, fmt.Sprintf("via %s: %v", ep, err))
	}
	return 0, 0, nil, nil, fmt.Errorf("joining the cluster failed: %s", strings.Join(errs, "; "))
}

// joinVia asks the member at ep to add this one; hdr receives the
// response header, which carries the cluster's peer secret.
func (s *Server) joinVia(ctx context.Context, ep string, memberID uint64, hdr *metadata.MD) ([]*dkvpb.Member, uint64, error) {
	conn, err := grpc.NewClient("passthrough:///"+ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	cc := dkvpb.NewClusterClient(conn)
	// Not WaitForReady: a refused connection is reported at once instead
	// of being retried until the deadline.
	list, err := cc.MemberList(ctx, &dkvpb.MemberListRequest{Linearizable: true}, grpc.Header(hdr))
	if err != nil {
		return nil, 0, dkverr.FromGRPC(err)
	}
	for _, m := range list.GetMembers() {
		if m.GetId() == memberID {
			// Already added (by an operator, or an earlier try).
			return list.GetMembers(), list.GetHeader().GetClusterId(), nil
		}
		if m.GetName() == s.cfg.Name {
			return nil, 0, fmt.Errorf("cluster already has a member named %q with peer URL %s", m.GetName(), m.GetPeerUrl())
		}
	}
	resp, err := cc.MemberAdd(ctx, &dkvpb.MemberAddRequest{Name: s.cfg.Name, PeerUrl: s.advPeer, IsLearner: true}, grpc.Header(hdr))
	if err != nil {
		return nil, 0, dkverr.FromGRPC(err)
	}
	return resp.GetMembers(), resp.GetHeader().GetClusterId(), nil
}

// The membership calls need leader-only knowledge (progress, who is
// active); a follower forwards them to the leader's client URL.
func (s *Server) leaderClient(ctx context.Context) (dkvpb.ClusterClient, func(), error) {
	// Right after a cluster forms, the leader may not have published its
	// client URL yet: poll the member table until it has, or ctx ends.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if lead := s.node.Status().Lead; lead != 0 {
			ms, err := state.Members(s.store.DB())
			if err != nil {
				return nil, nil, err
			}
			for _, m := range ms {
				if m.GetId() == lead && m.GetClientUrl() != "" {
					conn, err := grpc.NewClient("passthrough:///"+m.GetClientUrl(), grpc.WithTransportCredentials(insecure.NewCredentials()))
					if err != nil {
						return nil, nil, err
					}
					return dkvpb.NewClusterClient(conn), func() { conn.Close() }, nil
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, nil, dkverr.New(dkverr.Unavailable, "no leader with a known client URL before the deadline")
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
		return zero, wireErr(err)
	}
	defer closeFn()
	return call(lc)
}

func (s *Server) findMember(ctx context.Context, name string) (*dkvpb.Member, []*dkvpb.Member, error) {
	if err := s.node.WaitLinearizable(ctx); err != nil {
		return nil, nil, wireErr(err)
	}
	ms, err := state.Members(s.store.DB())
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
	return state.Members(s.store.DB())
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
		resp, err := onLeader(ctx, s, func(lc dkvpb.ClusterClient) (*dkvpb.MemberAddResponse, error) { return lc.MemberAdd(ctx, req) })
		if err == nil {
			s.offerPeerSecret(ctx, resp.GetMembers())
		}
		return resp, err
	}
	if m, ms, _ := s.findMember(ctx, req.GetName()); m != nil {
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
		return nil, wireErr(err)
	}
	ms, err := s.membersResp()
	if err != nil {
		return nil, wireErr(err)
	}
	s.offerPeerSecret(ctx, ms)
	return &dkvpb.MemberAddResponse{Header: s.header(), Member: rec, Members: ms}, nil
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
		return nil, wireErr(err)
	}
	// Caught up: within 10% (and at most 1000 entries) of the leader.
	lag := leaderMatch - min(match, leaderMatch)
	if !found || match == 0 || lag > 1000 || float64(match) < 0.9*float64(leaderMatch) {
		return nil, dkverr.New(dkverr.Conflict, "learner %q has not caught up (replicated to index %d, leader at %d); retry when it has", req.GetName(), match, leaderMatch)
	}
	ctxData, _ := proto.Marshal(&dkvpb.ConfChangeContext{Member: &dkvpb.Member{Id: m.GetId(), Name: m.GetName(), PeerUrl: m.GetPeerUrl(), ClientUrl: m.GetClientUrl()}})
	if err := s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(m.GetId()), Context: ctxData}); err != nil {
		return nil, wireErr(err)
	}
	ms, err := s.membersResp()
	if err != nil {
		return nil, wireErr(err)
	}
	return &dkvpb.MemberPromoteResponse{Header: s.header(), Members: ms}, nil
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
			return nil, wireErr(err)
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
			return &dkvpb.MemberRemoveResponse{Header: s.header()}, nil
		}
		return nil, wireErr(err)
	}
	ms, err := s.membersResp()
	if err != nil {
		return nil, wireErr(err)
	}
	return &dkvpb.MemberRemoveResponse{Header: s.header(), Members: ms}, nil
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
		return &dkvpb.LeaderTransferResponse{Header: s.header(), LeaderId: m.GetId()}, nil
	}
	if !s.node.Status().IsLeader {
		return onLeader(ctx, s, func(lc dkvpb.ClusterClient) (*dkvpb.LeaderTransferResponse, error) {
			return lc.LeaderTransfer(ctx, req)
		})
	}
	if err := s.node.TransferLeadership(ctx, m.GetId()); err != nil {
		return nil, wireErr(err)
	}
	return &dkvpb.LeaderTransferResponse{Header: s.header(), LeaderId: m.GetId()}, nil
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

// Removed is closed when this member has been removed from the cluster;
// dkv serve exits then.
func (s *Server) Removed() <-chan struct{} { return s.removed }

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
