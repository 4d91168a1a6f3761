package state

import (
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
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
	setMember := h.setMemberVersion
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

// TestKeptReplyEncoding: a kept reply decodes to the message that was
// kept, in the current encoding and in the anypb.Any earlier builds
// stored; damaged bytes are an error, not a panic or a wrong reply.
func TestKeptReplyEncoding(t *testing.T) {
	resp := &dkvpb.PutResponse{Header: &dkvpb.ResponseHeader{Revision: 42, RaftTerm: 3}}
	data, err := encodeReply(resp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeReply(data)
	if err != nil || !proto.Equal(got, resp) {
		t.Fatalf("decodeReply(encodeReply(%v)) = %v, %v", resp, got, err)
	}
	a, err := anypb.New(resp)
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := proto.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeReply(legacy); err != nil || !proto.Equal(got, resp) {
		t.Fatalf("decodeReply(an Any of %v) = %v, %v", resp, got, err)
	}
	for _, bad := range [][]byte{{0}, {0, 200}, {0, 5, 'd', 'k', 'v'}, {0, 3, 'n', 'o', 'p', 1}} {
		if got, err := decodeReply(bad); err == nil {
			t.Errorf("decodeReply(%v) = %v, want an error", bad, got)
		}
	}
}
