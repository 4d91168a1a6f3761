package state

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestMemberAttrsRecordVersion: MemberAttrs records the member's server
// version with its client URL; one without a version leaves the recorded
// version alone, and a later conf change (promotion) keeps it.
func TestMemberAttrsRecordVersion(t *testing.T) {
	h := newHarness(t)
	confChange := func(typ raftpb.ConfChangeType) {
		t.Helper()
		ctx, _ := proto.Marshal(&dkvpb.ConfChangeContext{Member: &dkvpb.Member{Id: 9, Name: "n9", PeerUrl: "p9"}})
		b := h.store.DB().NewIndexedBatch()
		defer b.Close()
		if err := h.m.ApplyConfChange(b, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: typ.Enum(), NodeId: proto.Uint64(9)}}}, ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	attrs := func(url, version string) {
		t.Helper()
		h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_MemberAttrs{MemberAttrs: &dkvpb.MemberAttrsRequest{Id: 9, ClientUrl: url, Version: version}}})
	}
	member := func() *dkvpb.Member {
		t.Helper()
		ms, err := Members(h.store.DB())
		if err != nil || len(ms) != 1 {
			t.Fatalf("members %v, %v", ms, err)
		}
		return ms[0]
	}
	confChange(raftpb.ConfChangeAddLearnerNode)
	attrs("c9", "0.2.0")
	if m := member(); m.GetVersion() != "0.2.0" || m.GetClientUrl() != "c9" {
		t.Fatalf("after MemberAttrs: %v", m)
	}
	attrs("c9b", "")
	if m := member(); m.GetVersion() != "0.2.0" || m.GetClientUrl() != "c9b" {
		t.Fatalf("after MemberAttrs without a version: %v, want version 0.2.0 kept", m)
	}
	confChange(raftpb.ConfChangeAddNode)
	if m := member(); m.GetVersion() != "0.2.0" || m.GetIsLearner() {
		t.Fatalf("after promotion: %v, want a voter with version 0.2.0", m)
	}
}
