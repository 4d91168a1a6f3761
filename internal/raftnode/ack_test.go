package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// syncBuffer is a log sink tests read while the node writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// leaderOf starts member 1 of {1, 2} and makes it leader, the test
// playing member 2 (named "n2") and granting its votes. It returns the
// leader's term.
func leaderOf(t *testing.T, logs *syncBuffer) (*Node[uint64], *sentLog, uint64) {
	t.Helper()
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	sent := &sentLog{}
	sm := &counterSM{t: t, db: st.DB(), applied: map[uint64]int{}}
	n, err := New(Config[uint64]{
		ID: 1, Storage: st, StateMachine: sm, Transport: sent,
		TickInterval: 10 * time.Millisecond, ElectionTicks: 1000, // campaigns only when told
		Peers: []raft.Peer{{ID: 1}, {ID: 2}},
		MemberName: func(id uint64) string {
			if id == 2 {
				return "n2"
			}
			return fmt.Sprintf("%x", id)
		},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Run()
	t.Cleanup(func() { n.Stop(); st.Close() })
	testutil.Eventually(t, 10*time.Second, "the bootstrap configuration applied", func() bool { return n.Status().Applied >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Inspect(ctx, func(rn *raft.RawNode) { _ = rn.Campaign() }); err != nil {
		t.Fatal(err)
	}
	// Grant the pre-vote, then the vote.
	for _, typ := range []raftpb.MessageType{raftpb.MsgPreVote, raftpb.MsgVote} {
		resp := raftpb.MsgPreVoteResp
		if typ == raftpb.MsgVote {
			resp = raftpb.MsgVoteResp
		}
		var req *raftpb.Message
		testutil.Eventually(t, 10*time.Second, typ.String(), func() bool {
			ms := sent.find(func(m *raftpb.Message) bool { return m.GetType() == typ && m.GetTo() == 2 })
			if len(ms) > 0 {
				req = ms[0]
			}
			return req != nil
		})
		step(t, n, &raftpb.Message{Type: resp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(req.GetTerm())})
	}
	testutil.Eventually(t, 10*time.Second, "member 1 to lead", func() bool { return n.Status().IsLeader })
	return n, sent, n.Status().Term
}

// TestLeaderSurvivesAckBeyondItsLog: a member (or a forger holding the
// peer secret) acknowledged an index past the end of the leader's log.
// Raft took it as the member's match index, found no entry to send next,
// went for a snapshot, had none and panicked ("need non-empty
// snapshot"), taking the leader down. Now such an acknowledgement is
// dropped before raft, counted and logged (once per interval) with the
// member's name and what to do; acknowledgements that are possible
// (rejections with any hint, heartbeat responses, a real ack) still work.
func TestLeaderSurvivesAckBeyondItsLog(t *testing.T) {
	logs := &syncBuffer{}
	n, sent, term := leaderOf(t, logs)
	// The leader's log: the two bootstrap conf changes and its empty
	// entry at 3, which n2 acknowledges as a follower would. A rejection
	// hinting far past it, and a heartbeat response, are possible and go
	// to raft; then two acks of 30004.
	for _, m := range []*raftpb.Message{
		{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term), Index: new(uint64(3))},
		{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term),
			Index: new(uint64(3)), Reject: new(true), RejectHint: new(uint64(30004)), LogTerm: new(term)},
		{Type: raftpb.MsgHeartbeatResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term)},
		{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term), Index: new(uint64(30004))},
		{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term), Index: new(uint64(30004))},
	} {
		step(t, n, m)
	}
	// Messages are stepped in the order received: once both acks are
	// counted, the three before them went to raft uncounted.
	testutil.Eventually(t, 10*time.Second, "the acks beyond the log counted", func() bool { return n.Stats().LogDivergence.Load() >= 2 })
	if got := n.Stats().LogDivergence.Load(); got != 2 {
		t.Fatalf("dkv_raft_log_divergence_total = %d, want 2 (the two acks of 30004 only)", got)
	}
	out := logs.String()
	if c := strings.Count(out, "acknowledged raft entries this leader does not have"); c != 1 {
		t.Fatalf("the drop was logged %d times, want once per interval; log:\n%s", c, out)
	}
	for _, want := range []string{"peer=n2", "index=30004", "last_index=3", "remove"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the log line does not say %q; log:\n%s", want, out)
		}
	}

	// The leader still leads and replicates: a proposal is sent to n2
	// from where its log really ends, and commits once n2 acknowledges it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { _, err := propose(ctx, n); res <- err }()
	var app *raftpb.Message
	testutil.Eventually(t, 10*time.Second, "the proposal sent to n2", func() bool {
		for _, m := range sent.find(func(m *raftpb.Message) bool { return m.GetType() == raftpb.MsgApp && m.GetTo() == 2 }) {
			for _, e := range m.GetEntries() {
				if e.GetIndex() == 4 {
					app = m
				}
			}
		}
		return app != nil
	})
	step(t, n, &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(term), Index: new(uint64(4))})
	if err := <-res; err != nil {
		t.Fatalf("a proposal after the bogus acks: %v", err)
	}
	if st := n.Status(); !st.IsLeader || st.Term != term || st.Commit < 4 {
		t.Fatalf("status after the bogus acks %+v, want leader of term %d with commit >= 4", st, term)
	}
}
