package server

import (
	"context"
	"net"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// UpdateMemberPeer moves member id to peerURL (host:port) through the raft
// log: a ConfChangeUpdateNode whose context carries the member's record
// with the new address. raft's configuration does not change; applying
// it rewrites the member table (state.ApplyMembership), and every member's
// transport then dials the new address (syncPeers runs after each applied
// conf change). The member keeps its id, which a started member reads
// from its data dir, not from its flags: restart it with the new
// --peer-addr and its existing data dir and it rejoins.
//
// A member that has not started yet (it has never published its client
// URL) is refused: it joins under the id its name and peer URL derive
// (join.go), which would not be the id it was added with.
func (s *Server) UpdateMemberPeer(ctx context.Context, id uint64, peerURL string) (*dkvpb.ResponseHeader, []*dkvpb.Member, error) {
	if _, port, err := net.SplitHostPort(peerURL); err != nil || port == "" {
		return nil, nil, dkverr.New(dkverr.InvalidInput, "peer URL %q is not host:port", peerURL)
	}
	if !s.node.Status().IsLeader {
		// On the leader: a follower that proposed it would then wait
		// for a read index, which the moved member (perhaps this one)
		// cannot get once the others dial its new, empty address.
		return s.updatePeerOnLeader(ctx, id, peerURL)
	}
	for {
		// After a linearizable wait, so an update acknowledged
		// anywhere is visible here.
		if err := s.node.WaitLinearizable(ctx); err != nil {
			return nil, nil, err
		}
		if _, err := s.recheck(ctx, &dkvpb.MemberRemoveRequest{}); err != nil {
			return nil, nil, err
		}
		ms, err := s.applied().Latest().Members()
		if err != nil {
			return nil, nil, err
		}
		m := memberWithID(ms, id)
		if m == nil {
			return nil, nil, dkverr.New(dkverr.NotFound, "no member with id %x", id)
		}
		if m.GetPeerUrl() == peerURL {
			return s.header(0), ms, nil
		}
		for _, o := range ms {
			if o.GetId() != id && o.GetPeerUrl() == peerURL {
				return nil, nil, dkverr.New(dkverr.Conflict, "member %q already uses peer URL %s", o.GetName(), peerURL)
			}
		}
		if m.GetClientUrl() == "" {
			return nil, nil, dkverr.New(dkverr.Conflict,
				"member %x (%s) has not started: it will join under the id its name and peer URL give, so it cannot move before it starts; remove it and add it at the new address", id, m.GetPeerUrl())
		}
		rec := &dkvpb.Member{Id: id, Name: m.GetName(), PeerUrl: peerURL}
		ctxData, err := proto.Marshal(&dkvpb.ConfChangeContext{Member: rec})
		if err != nil {
			return nil, nil, err
		}
		// On the leader ProposeConfChange returns once the entry
		// applied here. The member table here says whether it took (raft
		// may have turned it into an empty entry while another change
		// was pending): no linearizable wait after it, which a moved
		// leader could not get.
		if err := s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: new(id), Context: ctxData}); err != nil {
			return nil, nil, err
		}
		if ms, err = s.applied().Latest().Members(); err != nil {
			return nil, nil, err
		}
		if m := memberWithID(ms, id); m != nil && m.GetPeerUrl() == peerURL {
			return s.header(0), ms, nil
		}
	}
}

func memberWithID(ms []*dkvpb.Member, id uint64) *dkvpb.Member {
	for _, m := range ms {
		if m.GetId() == id {
			return m
		}
	}
	return nil
}

// updatePeerOnLeader asks the leader, through its etcd Cluster service
// (DKV's own API has no member update), and returns its answer as DKV's
// member records, with this member's header.
func (s *Server) updatePeerOnLeader(ctx context.Context, id uint64, peerURL string) (*dkvpb.ResponseHeader, []*dkvpb.Member, error) {
	conn, err := s.leaderConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	resp, err := etcdserverpb.NewClusterClient(conn).MemberUpdate(ctx, &etcdserverpb.MemberUpdateRequest{ID: id, PeerURLs: []string{peerURL}})
	if err != nil {
		return nil, nil, fromEtcdMemberErr(err)
	}
	hostPort := func(urls []string) string {
		if len(urls) == 0 {
			return ""
		}
		if _, rest, ok := strings.Cut(urls[0], "://"); ok {
			return rest
		}
		return urls[0]
	}
	ms := make([]*dkvpb.Member, 0, len(resp.GetMembers()))
	for _, m := range resp.GetMembers() {
		ms = append(ms, &dkvpb.Member{Id: m.GetID(), Name: m.GetName(), PeerUrl: hostPort(m.GetPeerURLs()), ClientUrl: hostPort(m.GetClientURLs()), IsLearner: m.GetIsLearner()})
	}
	return s.header(0), ms, nil
}

// fromEtcdMemberErr maps the leader's etcd answer back to the DKV error
// the etcd layer maps from, so a forwarded call fails as a local one.
func fromEtcdMemberErr(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := strings.TrimPrefix(st.Message(), "etcdserver: ")
	switch {
	case st.Code() == codes.NotFound:
		return dkverr.New(dkverr.NotFound, "%s", msg)
	case st.Code() == codes.FailedPrecondition && strings.Contains(msg, "has not started"):
		return dkverr.New(dkverr.Conflict, "%s", msg)
	case strings.Contains(msg, "Peer URLs already exists"):
		return dkverr.New(dkverr.Conflict, "%s (member already uses peer URL)", msg)
	}
	return err
}
