package raftnode

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/raft/v3"
)

// A member whose replicated state is ahead of its durable commit index
// restarts. That is the state a follower is left in when it is stopped
// right after installing a snapshot: the transport writes the sender's
// state as of when it streams it, entries past the snapshot's index, and
// the HardState's commit stays at the snapshot's index until the
// leader's next appends. Raft refused such a restart with a panic
// ("applied(N) is out of range [prevApplied(M), committed(M)]"); the
// in-process chaos run hit it on a follower killed just after it caught
// up by snapshot.
func TestRestartWithStateAheadOfCommit(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, _, stop := startNode(t, dir, 0)
	for i := 0; i < 10; i++ {
		if _, err := propose(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	commit := n.Status().Commit
	stop()

	// The state says it holds 7 entries more than the log has committed,
	// as a snapshot's streamed state would.
	st, err := storage.Open(dir, storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ahead := commit + 7
	b := st.DB().NewBatch()
	if err := storage.SetAppliedIndex(b, ahead); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	b.Close()

	sm := &counterSM{t: t, db: st.DB(), applied: map[uint64]int{}}
	var restarted *Node[uint64]
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("restart with the state at %d and the commit at %d panicked: %v", ahead, commit, r)
			}
		}()
		restarted, err = New(Config[uint64]{
			ID: 1, Storage: st, StateMachine: sm,
			TickInterval: 10 * time.Millisecond, ElectionTicks: 1000, // stays a follower: nothing new to apply
			Peers:  []raft.Peer{{ID: 1}},
			Logger: testutil.Quiet,
		})
	}()
	if err != nil {
		t.Fatalf("restart with the state ahead of the commit: %v", err)
	}
	restarted.Run()
	defer restarted.Stop()
	if got := restarted.Status().Applied; got != ahead {
		t.Fatalf("restarted member reports applied %d, want the state's %d", got, ahead)
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if len(sm.applied) != 0 {
		t.Fatalf("%d entries re-applied at restart, want none: the state already holds them", len(sm.applied))
	}
}
