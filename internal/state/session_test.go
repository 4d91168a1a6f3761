package state

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/proto"
)

// TestSessionOpenWaitsForEveryMember: a session opens only while every
// member in the table has published a version that applies sessions; a
// member with none yet, or an older one, makes SessionOpen refuse with
// SessionsUnavailable's error, decided at apply so every member agrees.
func TestSessionOpenWaitsForEveryMember(t *testing.T) {
	h := newHarness(t)
	open := func(id uint64) Result {
		return h.one(&dkvpb.InternalRequest{TimeUnixNano: 1e9, Request: &dkvpb.InternalRequest_SessionOpen{
			SessionOpen: &dkvpb.SessionOpenRequest{Id: id, TtlMs: 10_000}}})
	}
	setMember := func(id uint64, version string) {
		b := h.store.DB().NewBatch()
		data, err := proto.Marshal(&dkvpb.Member{Id: id, Name: "m", Version: version})
		if err != nil {
			t.Fatal(err)
		}
		if err := setMember(b, id, data); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	setMember(1, "0.2.0")
	if res := open(1); res.Err != nil {
		t.Fatalf("every member at 0.2.0: %v", res.Err)
	}
	for _, v := range []string{"", "0.1.9", "banana"} {
		setMember(2, v)
		res := open(2)
		if !SessionsUnavailable(res.Err) || dkverr.CodeOf(res.Err) != dkverr.SessionExpired {
			t.Fatalf("a member at version %q: open gave %v, want the sessions-unavailable refusal", v, res.Err)
		}
	}
	setMember(2, "1.0.0")
	if res := open(2); res.Err != nil {
		t.Fatalf("members at 0.2.0 and 1.0.0: %v", res.Err)
	}
	if m := OldMember([]*dkvpb.Member{{Id: 1, Version: ""}, {Id: 2, Version: "0.2.1"}}); m != nil {
		t.Fatalf("OldMember counted a member with no version yet: %v", m)
	}
	if m := OldMember([]*dkvpb.Member{{Id: 1, Version: "0.1.0"}}); m.GetId() != 1 {
		t.Fatalf("OldMember missed a 0.1.0 member")
	}
}
