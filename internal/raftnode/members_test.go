package raftnode

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// sentLog is a Transport that records what the node sends.
type sentLog struct {
	mu   sync.Mutex
	msgs []*raftpb.Message
}

func (s *sentLog) Send(ms []*raftpb.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, ms...)
}

func (s *sentLog) find(f func(*raftpb.Message) bool) []*raftpb.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*raftpb.Message
	for _, m := range s.msgs {
		if f(m) {
			out = append(out, m)
		}
	}
	return out
}

// followerOf starts member 2 of {1, 2}; the test plays member 1.
func followerOf(t *testing.T) (*Node[uint64], *sentLog) {
	t.Helper()
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	sent := &sentLog{}
	sm := &counterSM{t: t, db: st.DB(), applied: map[uint64]int{}}
	n, err := New(Config[uint64]{
		ID: 2, Storage: st, StateMachine: sm, Transport: sent,
		TickInterval: 10 * time.Millisecond, ElectionTicks: 1000, // never campaigns during the test
		Peers:  []raft.Peer{{ID: 1}, {ID: 2}},
		Logger: testutil.Quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Run()
	t.Cleanup(func() { n.Stop(); st.Close() })
	return n, sent
}

func step(t *testing.T, n *Node[uint64], m *raftpb.Message) {
	t.Helper()
	if err := n.Step(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// TestDivergedFollowerSaysSoAndStopsPingPong: a follower whose committed
// entry differs from the leader's (what a forged append left behind) used
// to answer every probe, below its commit "stale, I have up to my commit"
// and at it "rejected", so leader and follower exchanged appends at full
// speed forever, nothing logged. Now it answers none of them and counts
// the divergence.
func TestDivergedFollowerSaysSoAndStopsPingPong(t *testing.T) {
	n, sent := followerOf(t)
	data := command(1)
	// Bootstrap put the two conf changes at 1 and 2 (term 1). Member 1,
	// leader of term 5, appends entry 3 and commits it.
	step(t, n, &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5)),
		Index: new(uint64(2)), LogTerm: new(uint64(1)),
		Entries: []*raftpb.Entry{{Index: new(uint64(3)), Term: new(uint64(5)), Data: data}}, Commit: new(uint64(3))})
	testutil.Eventually(t, 10*time.Second, "entry 3 applied under leader 1", func() bool {
		st := n.Status()
		return st.Applied >= 3 && st.Lead == 1 && st.Term == 5
	})
	// Now member 1 claims entry 3 had term 4 and 2 had term 3: the
	// follower's committed log is not the leader's.
	for _, m := range []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5)),
			Index: new(uint64(3)), LogTerm: new(uint64(4)), Commit: new(uint64(3)), Entries: []*raftpb.Entry{{Index: new(uint64(4)), Term: new(uint64(5))}}},
		{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5)),
			Index: new(uint64(2)), LogTerm: new(uint64(3)), Commit: new(uint64(3)), Entries: []*raftpb.Entry{{Index: new(uint64(3)), Term: new(uint64(4))}}},
	} {
		step(t, n, m)
	}
	// A heartbeat after them: once it is answered, they were handled.
	step(t, n, &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5)), Commit: new(uint64(3))})
	testutil.Eventually(t, 10*time.Second, "the heartbeat answered", func() bool {
		return len(sent.find(func(m *raftpb.Message) bool { return m.GetType() == raftpb.MsgHeartbeatResp })) > 0
	})
	resps := sent.find(func(m *raftpb.Message) bool { return m.GetType() == raftpb.MsgAppResp })
	if len(resps) != 1 {
		// The first is the answer to the good append.
		t.Fatalf("the follower answered the diverging appends (%d MsgAppResp, want 1): %v", len(resps), resps)
	}
	if got := n.Stats().LogDivergence.Load(); got != 2 {
		t.Fatalf("LogDivergence = %d, want 2", got)
	}
	if st := n.Status(); st.Applied != 3 || st.Term != 5 {
		t.Fatalf("status %+v changed", st)
	}
}

// TestMembershipAdmitsAppliedAndPendingMembers: a stranger is not a
// member; a member being added by a conf change in the log is, before the
// change applies.
func TestMembershipAdmitsAppliedAndPendingMembers(t *testing.T) {
	n, _ := followerOf(t)
	for _, id := range []uint64{1, 2} {
		if !n.IsMember(id) {
			t.Fatalf("bootstrap member %d not admitted", id)
		}
	}
	if n.IsMember(3) || n.IsMember(999) {
		t.Fatal("a stranger is admitted")
	}
	cc, _ := proto.Marshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: new(uint64(3))})
	// Appended but not committed (commit stays at 2).
	step(t, n, &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(uint64(1)), To: new(uint64(2)), Term: new(uint64(5)),
		Index: new(uint64(2)), LogTerm: new(uint64(1)), Commit: new(uint64(2)),
		Entries: []*raftpb.Entry{{Index: new(uint64(3)), Term: new(uint64(5)), Type: raftpb.EntryConfChange.Enum(), Data: cc}}})
	testutil.Eventually(t, 10*time.Second, "the learner being added to be admitted", func() bool { return n.IsMember(3) })
	if n.IsMember(999) {
		t.Fatal("a stranger is admitted")
	}
}
