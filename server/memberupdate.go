package server

import (
	"context"
	"net"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"go.etcd.io/raft/v3/raftpb"
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
	for {
		// After a linearizable wait, so an update acknowledged anywhere
		// (or one this loop proposed) is visible here.
		if err := s.node.WaitLinearizable(ctx); err != nil {
			return nil, nil, err
		}
		if _, err := s.recheck(ctx, &dkvpb.MemberRemoveRequest{}); err != nil {
			return nil, nil, err
		}
		ms, err := state.Members(s.store.DB())
		if err != nil {
			return nil, nil, err
		}
		var m *dkvpb.Member
		for _, x := range ms {
			if x.GetId() == id {
				m = x
			}
		}
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
		// ProposeConfChange returns once the entry applied here. raft may
		// have turned it into an empty entry (another change was
		// pending on the leader); the member table says whether it
		// took, and the loop proposes it again if not.
		if err := s.node.ProposeConfChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: new(id), Context: ctxData}); err != nil {
			return nil, nil, err
		}
	}
}
