package state

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestUpdateNodeMovesPeerURL: a ConfChangeUpdateNode rewrites the member's
// peer URL only: its name, client URL and learner role stay (raft's
// configuration does not change). One naming an address another member
// uses, or a member not in the table, changes nothing.
func TestUpdateNodeMovesPeerURL(t *testing.T) {
	h := newHarness(t)
	apply := func(typ raftpb.ConfChangeType, m *dkvpb.Member) {
		t.Helper()
		ctx, _ := proto.Marshal(&dkvpb.ConfChangeContext{Member: m})
		b := h.store.DB().NewIndexedBatch()
		defer b.Close()
		if err := h.m.ApplyConfChange(b, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: proto.Uint64(m.GetId())}}}, ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	byID := func(id uint64) *dkvpb.Member {
		t.Helper()
		ms, err := Members(h.store.DB())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.GetId() == id {
				return m
			}
		}
		return nil
	}
	apply(raftpb.ConfChangeAddNode, &dkvpb.Member{Id: 8, Name: "n8", PeerUrl: "p8:1"})
	apply(raftpb.ConfChangeAddLearnerNode, &dkvpb.Member{Id: 9, Name: "n9", PeerUrl: "p9:1"})
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_MemberAttrs{MemberAttrs: &dkvpb.MemberAttrsRequest{Id: 9, ClientUrl: "c9:1"}}})

	apply(raftpb.ConfChangeUpdateNode, &dkvpb.Member{Id: 9, Name: "n9", PeerUrl: "p9:2"})
	if m := byID(9); m.GetPeerUrl() != "p9:2" || m.GetName() != "n9" || m.GetClientUrl() != "c9:1" || !m.GetIsLearner() {
		t.Fatalf("after the update: %v, want learner n9 at p9:2 with client URL c9:1", m)
	}
	apply(raftpb.ConfChangeUpdateNode, &dkvpb.Member{Id: 9, Name: "n9", PeerUrl: "p8:1"})
	if m := byID(9); m.GetPeerUrl() != "p9:2" {
		t.Fatalf("an update to n8's address moved n9 to %s", m.GetPeerUrl())
	}
	apply(raftpb.ConfChangeUpdateNode, &dkvpb.Member{Id: 7, Name: "n7", PeerUrl: "p7:1"})
	if m := byID(7); m != nil {
		t.Fatalf("an update of a member not in the table added %v", m)
	}
}
