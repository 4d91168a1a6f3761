package raftnode

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// counterSM is a state machine that adds each request's id into a
// persisted counter and remembers, in memory, which ids it applied and in
// what order Committed saw the indexes.
type counterSM struct {
	t  testing.TB
	db *pebble.DB

	mu        sync.Mutex
	applied   map[uint64]int // request id -> times applied
	committed []uint64       // Committed's index argument, in call order
	inCommit  bool           // between Committing and Committed
}

var counterKey = []byte("s/test/counter")

// A test command is the proposal id, 8 bytes big-endian, optionally
// followed by padding (a large entry).
func command(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// propose proposes one test command and returns the counter it set.
func propose(ctx context.Context, n *Node[uint64]) (uint64, error) {
	id := n.NextID()
	return n.Propose(ctx, id, command(id))
}

func (m *counterSM) Apply(b *pebble.Batch, index uint64, data []byte) (uint64, uint64) {
	var id uint64
	if len(data) >= 8 {
		id = binary.BigEndian.Uint64(data)
	}
	m.mu.Lock()
	m.applied[id]++
	m.mu.Unlock()
	var sum uint64
	if v, c, err := b.Get(counterKey); err == nil {
		sum = binary.BigEndian.Uint64(v)
		c.Close()
	}
	sum++
	if err := b.Set(counterKey, binary.BigEndian.AppendUint64(nil, sum), nil); err != nil {
		m.t.Error(err)
	}
	return id, sum
}

func (m *counterSM) ApplyConfChange(*pebble.Batch, *raftpb.ConfChangeV2, []byte) error { return nil }

func (m *counterSM) Committing() {
	m.mu.Lock()
	m.inCommit = true
	m.mu.Unlock()
}

func (m *counterSM) Committed(index uint64, _ []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.inCommit {
		m.t.Errorf("Committed(%d) without Committing first", index)
	}
	m.inCommit = false
	m.committed = append(m.committed, index)
}

func (m *counterSM) Restored() error { return nil }

// startNode opens (or reopens) a single-member node in dir.
func startNode(t testing.TB, dir string, snapshotCount uint64) (*Node[uint64], *counterSM, func()) {
	t.Helper()
	return startNodeWith(t, dir, func(c *Config[uint64]) { c.SnapshotCount = snapshotCount })
}

// startNodeWith is startNode with edit applied to the node's Config.
func startNodeWith(t testing.TB, dir string, edit func(*Config[uint64])) (*Node[uint64], *counterSM, func()) {
	t.Helper()
	st, err := storage.Open(dir, storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	sm := &counterSM{t: t, db: st.DB(), applied: map[uint64]int{}}
	cfg := Config[uint64]{
		ID: 1, Storage: st, StateMachine: sm,
		TickInterval: 10 * time.Millisecond, ElectionTicks: 5,
		Peers:          []raft.Peer{{ID: 1}},
		CatchUpEntries: 10,
		Logger:         testutil.Quiet,
	}
	edit(&cfg)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Run()
	return n, sm, func() {
		n.Stop()
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	}
}

func counter(t *testing.T, db *pebble.DB) uint64 {
	t.Helper()
	v, c, err := db.Get(counterKey)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return binary.BigEndian.Uint64(v)
}

// Concurrent proposals are each applied exactly once, each proposer gets
// its own entry's result, and Committed sees indexes in increasing order.
func TestConcurrentProposalsApplyOnceWithOwnResult(t *testing.T) {
	n, sm, stop := startNode(t, t.TempDir(), 0)
	defer stop()
	const proposers, each = 16, 50
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make(chan uint64, proposers*each)
	var wg sync.WaitGroup
	for p := 0; p < proposers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, err := propose(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				results <- res
			}
		}()
	}
	wg.Wait()
	close(results)
	// The counter's value after each apply is unique: every proposer got
	// the result of its own entry, none got another's or a duplicate.
	seen := map[uint64]bool{}
	for r := range results {
		if seen[r] {
			t.Fatalf("two proposers got result %d", r)
		}
		seen[r] = true
	}
	if len(seen) != proposers*each {
		t.Fatalf("%d results, want %d", len(seen), proposers*each)
	}
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if len(sm.applied) != proposers*each {
		t.Fatalf("%d distinct requests applied, want %d", len(sm.applied), proposers*each)
	}
	for id, k := range sm.applied {
		if k != 1 {
			t.Fatalf("request %x applied %d times", id, k)
		}
	}
	for i := 1; i < len(sm.committed); i++ {
		if sm.committed[i] <= sm.committed[i-1] {
			t.Fatalf("Committed saw index %d after %d", sm.committed[i], sm.committed[i-1])
		}
	}
}

// A restart resumes from the durable applied index: nothing is applied
// twice and nothing is lost, also across log compactions.
func TestRestartResumesWithoutReapplying(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want uint64
	for round := 0; round < 3; round++ {
		n, sm, stop := startNode(t, dir, 20) // compacts the log every ~20 entries
		for i := 0; i < 45; i++ {
			if _, err := propose(ctx, n); err != nil {
				t.Fatal(err)
			}
			want++
		}
		if got := counter(t, sm.db); got != want {
			t.Fatalf("round %d: counter %d, want %d", round, got, want)
		}
		sm.mu.Lock()
		for id, k := range sm.applied {
			if k != 1 {
				t.Fatalf("round %d: request %x applied %d times", round, id, k)
			}
		}
		// Only this round's proposals were applied by this incarnation.
		if len(sm.applied) != 45 {
			t.Fatalf("round %d: %d requests applied after restart, want 45 (earlier ones re-applied?)", round, len(sm.applied))
		}
		sm.mu.Unlock()
		stop()
	}
}

// A proposal whose context has already ended fails (not sent, or sent
// with its outcome unknown), and the node keeps serving.
func TestProposeWithEndedContext(t *testing.T) {
	n, sm, stop := startNode(t, t.TempDir(), 0)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := propose(ctx, n); err == nil {
		t.Fatal("a proposal with an ended context succeeded")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	res, err := propose(ctx2, n)
	if err != nil {
		t.Fatal(err)
	}
	if got := counter(t, sm.db); fmt.Sprint(res) != fmt.Sprint(got) {
		t.Fatalf("proposal returned %v, but the counter it set is %d", res, got)
	}
}

// Large entries: the log is bounded by size as well as by count. 200
// entries of 64 KiB are far below the count that compacts (10,000 +
// 10), but 12.5 MiB against a 1 MiB bound: the log is compacted and
// keeps at most a quarter of the bound (plus the last apply batch).
func TestLogBoundedBySize(t *testing.T) {
	const entry, bound = 64 << 10, 1 << 20
	n, sm, stop := startNodeWith(t, t.TempDir(), func(c *Config[uint64]) {
		c.SnapshotCount = 10000
		c.LogBytes = bound
	})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pad := make([]byte, entry)
	for range 200 {
		id := n.NextID()
		if _, err := n.Propose(ctx, id, append(command(id), pad...)); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, sm.db); got != 200 {
		t.Fatalf("counter %d, want 200", got)
	}
	first, err := n.store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := n.store.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	// Each proposal is applied on its own here (they are sequential), so
	// a batch is one entry.
	if kept := last - first + 1; kept > bound/4/entry+1 {
		t.Fatalf("log holds entries %d..%d (%d of %d KiB), want at most %d", first, last, kept, entry>>10, bound/4/entry+1)
	}
}
