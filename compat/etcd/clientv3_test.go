package etcdcompat

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
)

// TestClientV3 runs Go clientv3's concurrency package and experimental
// recipes against one cluster of the target, each subtest under its own
// key prefix, checking the behaviour their documentation promises.
func TestClientV3(t *testing.T) {
	c := startCluster(t, target(t))
	t.Run("Mutex", func(t *testing.T) { testMutex(t, c) })
	t.Run("MutexSessionExpiry", func(t *testing.T) { testMutexExpiry(t, c) })
	t.Run("Election", func(t *testing.T) { testElection(t, c) })
	for _, iso := range []struct {
		name string
		iso  concurrency.Isolation
	}{
		{"SerializableSnapshot", concurrency.SerializableSnapshot},
		{"Serializable", concurrency.Serializable},
		{"RepeatableReads", concurrency.RepeatableReads},
		{"ReadCommitted", concurrency.ReadCommitted},
	} {
		t.Run("STMConflict/"+iso.name, func(t *testing.T) { testSTMConflict(t, c, iso.name, iso.iso) })
		t.Run("STMBank/"+iso.name, func(t *testing.T) { testSTMBank(t, c, iso.name, iso.iso) })
	}
	t.Run("TxnCompareTargets", func(t *testing.T) { testTxnCompares(t, c) })
	t.Run("Barrier", func(t *testing.T) { testBarrier(t, c) })
	t.Run("DoubleBarrier", func(t *testing.T) { testDoubleBarrier(t, c) })
	t.Run("Queue", func(t *testing.T) { testQueue(t, c) })
	t.Run("RWMutex", func(t *testing.T) { testRWMutex(t, c) })
}

func newSession(t *testing.T, cli *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// keysUnder counts the keys under prefix.
func keysUnder(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return r.Count, nil
}

// waitKeys waits until prefix holds n keys.
func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	testutil.EventuallyNoError(t, 20*time.Second, fmt.Sprintf("%d keys under %s", n, prefix), func(ctx context.Context) error {
		got, err := keysUnder(ctx, cli, prefix)
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("%d keys", got)
		}
		return nil
	})
}

func testMutex(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := c.newClient(t)
	s1, s2 := newSession(t, cli, 10), newSession(t, c.newClient(t), 10)
	m1, m2 := concurrency.NewMutex(s1, "/mutex/try"), concurrency.NewMutex(s2, "/mutex/try")
	if err := m1.TryLock(ctx); err != nil {
		t.Fatalf("TryLock on a free mutex: %v", err)
	}
	if err := m2.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock on a held mutex: %v, want ErrLocked", err)
	}
	// A refused TryLock leaves no waiter key behind.
	if n, err := keysUnder(ctx, cli, "/mutex/try/"); err != nil || n != 1 {
		t.Fatalf("after a refused TryLock: %d keys (%v), want the holder's only", n, err)
	}
	// The holder's key is its session's lease, and IsOwner guards a write.
	if r, err := cli.Get(ctx, m1.Key()); err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease != int64(s1.Lease()) {
		t.Fatalf("holder key %s: %v %v", m1.Key(), r, err)
	}
	if r, err := cli.Txn(ctx).If(m2.IsOwner()).Then(clientv3.OpPut("/mutex/guarded", "m2")).Commit(); err != nil || r.Succeeded {
		t.Fatalf("a write guarded by a non-owner's IsOwner succeeded (%v)", err)
	}
	if r, err := cli.Txn(ctx).If(m1.IsOwner()).Then(clientv3.OpPut("/mutex/guarded", "m1")).Commit(); err != nil || !r.Succeeded {
		t.Fatalf("a write guarded by the owner's IsOwner failed (%v)", err)
	}
	// Lock waits for the holder; it acquires once the holder unlocks.
	locked := make(chan error, 1)
	go func() { locked <- m2.Lock(ctx) }()
	waitKeys(t, cli, "/mutex/try/", 2)
	notYet(t, "Lock of a held mutex", locked)
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 20*time.Second, "Lock after Unlock", locked); err != nil {
		t.Fatal(err)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Contention: three sessions increment a counter with a plain
	// read-modify-write under the mutex; none is lost and no two are
	// ever inside at once.
	const perWorker = 8
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for w := range 3 {
		s := newSession(t, c.newClient(t), 10)
		wg.Go(func() {
			m := concurrency.NewMutex(s, "/mutex/counter")
			kv := s.Client()
			for range perWorker {
				if err := m.Lock(ctx); err != nil {
					errs <- fmt.Errorf("worker %d Lock: %w", w, err)
					return
				}
				for n := inside.Add(1); ; {
					old := maxInside.Load()
					if n <= old || maxInside.CompareAndSwap(old, n) {
						break
					}
				}
				r, err := kv.Get(ctx, "/mutex/count")
				if err != nil {
					errs <- err
					return
				}
				n := 0
				if len(r.Kvs) == 1 {
					n, _ = strconv.Atoi(string(r.Kvs[0].Value))
				}
				tr, err := kv.Txn(ctx).If(m.IsOwner()).Then(clientv3.OpPut("/mutex/count", strconv.Itoa(n+1))).Commit()
				if err != nil || !tr.Succeeded {
					errs <- fmt.Errorf("worker %d: guarded put failed: %v", w, err)
					return
				}
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := cli.Get(ctx, "/mutex/count")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.Kvs[0].Value); got != strconv.Itoa(3*perWorker) {
		t.Fatalf("counter = %s after %d locked increments", got, 3*perWorker)
	}
	if maxInside.Load() != 1 {
		t.Fatalf("%d holders inside the mutex at once", maxInside.Load())
	}
	if n, _ := keysUnder(ctx, cli, "/mutex/counter/"); n != 0 {
		t.Fatalf("%d lock keys left after every Unlock", n)
	}
}

// testMutexExpiry: a holder whose session's lease expires loses the
// mutex, and a waiter gets it.
func testMutexExpiry(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := c.newClient(t)
	s1, s2 := newSession(t, c.newClient(t), 2), newSession(t, cli, 10)
	m1, m2 := concurrency.NewMutex(s1, "/mutex/expiry"), concurrency.NewMutex(s2, "/mutex/expiry")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() { locked <- m2.Lock(ctx) }()
	waitKeys(t, cli, "/mutex/expiry/", 2)
	notYet(t, "Lock of a mutex held by a live session", locked)
	s1.Orphan() // stops the keep-alives; the lease expires within its TTL
	if err := within(t, 30*time.Second, "Lock after the holder's session expired", locked); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, m1.Key()); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("expired holder's key %s still there (%v)", m1.Key(), err)
	}
	if r, err := cli.TimeToLive(ctx, s1.Lease()); err != nil || r.TTL != -1 {
		t.Fatalf("expired session's lease TTL = %v (%v), want -1", r, err)
	}
}

func testElection(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := c.newClient(t)
	s1, s2, s3 := newSession(t, cli, 10), newSession(t, c.newClient(t), 10), newSession(t, c.newClient(t), 10)
	e1, e2 := concurrency.NewElection(s1, "/election/e"), concurrency.NewElection(s2, "/election/e")
	observer := concurrency.NewElection(s3, "/election/e")

	if _, err := observer.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader with no campaign: %v, want ErrElectionNoLeader", err)
	}
	if err := e1.Proclaim(ctx, "x"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Fatalf("Proclaim before Campaign: %v, want ErrElectionNotLeader", err)
	}
	if err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	obsCtx, obsCancel := context.WithCancel(ctx)
	defer obsCancel()
	obs := observer.Observe(obsCtx)
	expectObserved := func(want string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case r, ok := <-obs:
				if !ok {
					t.Fatalf("Observe closed while waiting for %q", want)
				}
				if got := string(r.Kvs[0].Value); got == want {
					return
				}
			case <-deadline:
				t.Fatalf("Observe did not show leader value %q", want)
			}
		}
	}
	expectObserved("a")
	leader := func(want string) {
		t.Helper()
		r, err := observer.Leader(ctx)
		if err != nil || string(r.Kvs[0].Value) != want {
			t.Fatalf("Leader = %v (%v), want %q", r, err, want)
		}
	}
	leader("a")
	if l, _ := observer.Leader(ctx); string(l.Kvs[0].Key) != e1.Key() || l.Kvs[0].Lease != int64(s1.Lease()) {
		t.Fatalf("leader key %s lease %x, want %s on %x", l.Kvs[0].Key, l.Kvs[0].Lease, e1.Key(), s1.Lease())
	}

	// A second candidate waits while the first leads.
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "c") }()
	waitKeys(t, cli, "/election/e/", 2)
	notYet(t, "Campaign against a leader", won)

	if err := e1.Proclaim(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	expectObserved("b")
	leader("b")
	notYet(t, "Campaign against a leader that proclaimed", won)

	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 20*time.Second, "Campaign after the leader resigned", won); err != nil {
		t.Fatal(err)
	}
	expectObserved("c")
	leader("c")
	if err := e1.Proclaim(ctx, "late"); !errors.Is(err, concurrency.ErrElectionNotLeader) {
		t.Fatalf("Proclaim after Resign: %v, want ErrElectionNotLeader", err)
	}
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := observer.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) {
		t.Fatalf("Leader after every candidate resigned: %v, want ErrElectionNoLeader", err)
	}
	// A resumed election (from a leader key and revision) can proclaim.
	if err := e1.Campaign(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	re := concurrency.ResumeElection(s1, "/election/e", e1.Key(), e1.Rev())
	if err := re.Proclaim(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	expectObserved("e")
}

// testSTMConflict checks deterministically which conflicts make each
// isolation level retry: between the STM's read of a key and its
// commit, another client writes that key (a read conflict) or a key the
// STM only writes (a write conflict).
func testSTMConflict(t *testing.T, c *cluster, name string, iso concurrency.Isolation) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The STM's client talks to one member, which has applied the
	// setup writes when they return: RepeatableReads and ReadCommitted
	// read serializably, and a stale read would be a conflict of its own.
	cli, other := c.newClientAt(t, c.members[0]), c.newClient(t)
	pfx := "/stm-conflict/" + name + "/"
	for _, kind := range []string{"read", "write"} {
		r, w := pfx+kind+"/r", pfx+kind+"/w"
		if _, err := cli.Put(ctx, r, "0"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, w, "0"); err != nil {
			t.Fatal(err)
		}
		attempts := 0
		_, err := concurrency.NewSTM(cli, func(s concurrency.STM) error {
			attempts++
			v := s.Get(r)
			if attempts == 1 {
				k := r
				if kind == "write" {
					k = w
				}
				if _, err := other.Put(ctx, k, "other"); err != nil {
					return err
				}
			}
			s.Put(w, "stm-saw-"+v)
			return nil
		}, concurrency.WithIsolation(iso), concurrency.WithAbortContext(ctx))
		if err != nil {
			t.Fatalf("%s conflict: %v", kind, err)
		}
		// What etcd's stm.go documents: every level but ReadCommitted
		// validates its reads at commit; SerializableSnapshot also
		// validates the keys it writes.
		wantRetry := map[string]map[concurrency.Isolation]bool{
			"read":  {concurrency.SerializableSnapshot: true, concurrency.Serializable: true, concurrency.RepeatableReads: true},
			"write": {concurrency.SerializableSnapshot: true},
		}[kind][iso]
		if got := attempts > 1; got != wantRetry {
			t.Errorf("%s conflict under %s: ran %d times, want retry=%v", kind, name, attempts, wantRetry)
		}
		g, err := cli.Get(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		want := "stm-saw-0"
		if kind == "read" && wantRetry {
			want = "stm-saw-other"
		}
		if got := string(g.Kvs[0].Value); got != want {
			t.Errorf("%s conflict under %s: %s = %q, want %q", kind, name, w, got, want)
		}
	}
}

// testSTMBank runs contended transfers between accounts. Every
// committed transfer is applied whole (both accounts or neither, at one
// revision); under the three levels that validate reads the total is
// also kept, and read-only STMs running beside the transfers always see
// it. ReadCommitted documents no such guarantee: its drift is logged.
func testSTMBank(t *testing.T, c *cluster, name string, iso concurrency.Isolation) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const accounts, start, workers, transfers = 4, 100, 3, 10
	pfx := "/stm-bank/" + name + "/"
	acct := func(i int) string { return pfx + strconv.Itoa(i) }
	cli := c.newClient(t)
	for i := range accounts {
		if _, err := cli.Put(ctx, acct(i), strconv.Itoa(start)); err != nil {
			t.Fatal(err)
		}
	}
	strong := iso != concurrency.ReadCommitted
	type commit struct {
		rev    int64
		writes map[string]string
	}
	var mu sync.Mutex
	var commits []commit
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := range workers {
		// Each worker talks to one member, as a process near it would:
		// the serializable levels read at their first read's revision,
		// which a client balancing across members may ask of a member
		// that has not applied it yet (ErrFutureRev, on etcd too).
		wcli := c.newClientAt(t, c.members[w%len(c.members)])
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range transfers {
				from, to := rng.IntN(accounts), rng.IntN(accounts-1)
				if to >= from {
					to++
				}
				var writes map[string]string
				resp, err := concurrency.NewSTM(wcli, func(s concurrency.STM) error {
					a, _ := strconv.Atoi(s.Get(acct(from)))
					b, _ := strconv.Atoi(s.Get(acct(to)))
					amt := min(a, 1+rng.IntN(20))
					writes = map[string]string{acct(from): strconv.Itoa(a - amt), acct(to): strconv.Itoa(b + amt)}
					for k, v := range writes {
						s.Put(k, v)
					}
					return nil
				}, concurrency.WithIsolation(iso), concurrency.WithAbortContext(ctx))
				if err != nil {
					errs <- fmt.Errorf("transfer: %w", err)
					return
				}
				mu.Lock()
				commits = append(commits, commit{resp.Header.Revision, writes})
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	var audits atomic.Int32
	auditWG := sync.WaitGroup{}
	if strong {
		acli := c.newClientAt(t, c.members[0])
		auditWG.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				sum := 0
				_, err := concurrency.NewSTM(acli, func(s concurrency.STM) error {
					sum = 0
					for i := range accounts {
						v, _ := strconv.Atoi(s.Get(acct(i)))
						sum += v
					}
					return nil
				}, concurrency.WithIsolation(iso), concurrency.WithAbortContext(ctx))
				if err != nil {
					errs <- fmt.Errorf("audit: %w", err)
					return
				}
				if sum != accounts*start {
					errs <- fmt.Errorf("audit saw total %d, want %d", sum, accounts*start)
					return
				}
				audits.Add(1)
			}
		})
	}
	wg.Wait()
	close(done)
	auditWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := cli.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]string{}
	total := 0
	for _, kv := range r.Kvs {
		final[string(kv.Key)] = string(kv.Value)
		v, _ := strconv.Atoi(string(kv.Value))
		if v < 0 && strong {
			t.Errorf("%s = %d: overdrawn", kv.Key, v)
		}
		total += v
	}
	// Each account ends with what the last committed transfer that
	// touched it wrote: a commit is one revision, applied whole.
	last := map[string]commit{}
	revs := map[int64]bool{}
	for _, cm := range commits {
		if revs[cm.rev] {
			t.Errorf("two transfers committed at revision %d", cm.rev)
		}
		revs[cm.rev] = true
		for k := range cm.writes {
			if cm.rev > last[k].rev {
				last[k] = cm
			}
		}
	}
	for k, cm := range last {
		if final[k] != cm.writes[k] {
			t.Errorf("%s = %s, but the last transfer touching it (revision %d) wrote %s", k, final[k], cm.rev, cm.writes[k])
		}
		if kv := findKV(r, k); kv == nil || kv.ModRevision != cm.rev {
			t.Errorf("%s last modified at %v, want the revision of its last transfer %d", k, kv, cm.rev)
		}
	}
	if len(commits) != workers*transfers {
		t.Fatalf("%d transfers committed, want %d", len(commits), workers*transfers)
	}
	if strong {
		if total != accounts*start {
			t.Fatalf("total %d after transfers, want %d", total, accounts*start)
		}
		t.Logf("%d transfers, %d consistent audits, total kept at %d", len(commits), audits.Load(), total)
	} else {
		t.Logf("%d transfers; ReadCommitted does not validate reads, total drifted by %d (documented, not checked)", len(commits), total-accounts*start)
	}
}

func findKV(r *clientv3.GetResponse, key string) *struct{ ModRevision int64 } {
	for _, kv := range r.Kvs {
		if string(kv.Key) == key {
			return &struct{ ModRevision int64 }{kv.ModRevision}
		}
	}
	return nil
}

func testBarrier(t *testing.T, c *cluster) {
	cli := c.newClient(t)
	b := recipe.NewBarrier(cli, "/barrier/b")
	// Wait on a barrier nobody holds returns at once.
	if err := within(t, 10*time.Second, "Wait on an unheld barrier", goErr(b.Wait)); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(); !errors.Is(err, recipe.ErrKeyExists) {
		t.Fatalf("second Hold: %v, want ErrKeyExists", err)
	}
	var waits []<-chan error
	for range 3 {
		waits = append(waits, goErr(recipe.NewBarrier(c.newClient(t), "/barrier/b").Wait))
	}
	for _, w := range waits {
		notYet(t, "Wait on a held barrier", w)
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	for _, w := range waits {
		if err := within(t, 20*time.Second, "Wait after Release", w); err != nil {
			t.Fatal(err)
		}
	}
}

func goErr(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func testDoubleBarrier(t *testing.T, c *cluster) {
	const n = 3
	cli := c.newClient(t)
	var bs []*recipe.DoubleBarrier
	for range n {
		bs = append(bs, recipe.NewDoubleBarrier(newSession(t, c.newClient(t), 10), "/dbarrier/d", n))
	}
	// Enter blocks until n have entered.
	// They enter one after another, so bs[0] holds the lowest key.
	var enters []<-chan error
	for i := range n - 1 {
		enters = append(enters, goErr(bs[i].Enter))
		waitKeys(t, cli, "/dbarrier/d/waiters/", int64(i+1))
	}
	for _, e := range enters {
		notYet(t, "Enter before the count is reached", e)
	}
	enters = append(enters, goErr(bs[n-1].Enter))
	for _, e := range enters {
		if err := within(t, 20*time.Second, "Enter once the count is reached", e); err != nil {
			t.Fatal(err)
		}
	}
	// Leave blocks until all have left: the others delete their keys
	// and wait for the lowest, bs[0].
	var leaves []<-chan error
	for i := 1; i < n; i++ {
		leaves = append(leaves, goErr(bs[i].Leave))
	}
	waitKeys(t, cli, "/dbarrier/d/waiters/", 1)
	for _, l := range leaves {
		notYet(t, "Leave before all have left", l)
	}
	leaves = append(leaves, goErr(bs[0].Leave))
	for _, l := range leaves {
		if err := within(t, 20*time.Second, "Leave once all have left", l); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := keysUnder(context.Background(), cli, "/dbarrier/d"); n != 0 {
		t.Fatalf("%d keys left after every Leave", n)
	}
}

func testQueue(t *testing.T, c *cluster) {
	q := recipe.NewQueue(c.newClient(t), "/queue/q")
	for _, v := range []string{"a", "b", "c"} {
		if err := q.Enqueue(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a", "b", "c"} {
		v, err := q.Dequeue()
		if err != nil || v != want {
			t.Fatalf("Dequeue = %q, %v; want %q (FIFO)", v, err, want)
		}
	}
	// Dequeue on an empty queue waits for the next Enqueue.
	got := make(chan string, 1)
	go func() {
		v, err := recipe.NewQueue(c.newClient(t), "/queue/q").Dequeue()
		if err != nil {
			v = "error: " + err.Error()
		}
		got <- v
	}()
	notYet(t, "Dequeue on an empty queue", got)
	if err := q.Enqueue("d"); err != nil {
		t.Fatal(err)
	}
	if v := within(t, 20*time.Second, "Dequeue after Enqueue", got); v != "d" {
		t.Fatalf("waiting Dequeue = %q, want d", v)
	}
	// Competing consumers take every item exactly once.
	const items = 12
	for i := range items {
		if err := q.Enqueue(strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 3 {
		cq := recipe.NewQueue(c.newClient(t), "/queue/q")
		wg.Go(func() {
			for range items / 3 {
				v, err := cq.Dequeue()
				if err != nil {
					failed.Store(err)
					return
				}
				mu.Lock()
				seen[v]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if seen[strconv.Itoa(i)] != 1 {
			t.Fatalf("item %d dequeued %d times (%v)", i, seen[strconv.Itoa(i)], seen)
		}
	}
}

func testRWMutex(t *testing.T, c *cluster) {
	cli := c.newClient(t)
	r1 := recipe.NewRWMutex(newSession(t, c.newClient(t), 10), "/rwmutex/m")
	r2 := recipe.NewRWMutex(newSession(t, c.newClient(t), 10), "/rwmutex/m")
	w := recipe.NewRWMutex(newSession(t, c.newClient(t), 10), "/rwmutex/m")
	r3 := recipe.NewRWMutex(newSession(t, c.newClient(t), 10), "/rwmutex/m")
	// Readers share the lock.
	if err := within(t, 20*time.Second, "first RLock", goErr(r1.RLock)); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 20*time.Second, "second RLock beside a reader", goErr(r2.RLock)); err != nil {
		t.Fatal(err)
	}
	// A writer waits for the readers.
	wl := goErr(w.Lock)
	waitKeys(t, cli, "/rwmutex/m/write", 1)
	notYet(t, "Lock while readers hold", wl)
	// A reader that comes after a waiting writer waits too.
	rl := goErr(r3.RLock)
	waitKeys(t, cli, "/rwmutex/m/read", 3)
	notYet(t, "RLock behind a waiting writer", rl)
	if err := r1.RUnlock(); err != nil {
		t.Fatal(err)
	}
	notYet(t, "Lock while one reader still holds", wl)
	if err := r2.RUnlock(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 20*time.Second, "Lock after the readers left", wl); err != nil {
		t.Fatal(err)
	}
	notYet(t, "RLock while a writer holds", rl)
	if err := w.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, 20*time.Second, "RLock after the writer left", rl); err != nil {
		t.Fatal(err)
	}
	if err := r3.RUnlock(); err != nil {
		t.Fatal(err)
	}
}

// testTxnCompares checks every compare target (value, version, create,
// mod, lease) both ways, and a nested txn. etcdctl 3.4 cannot send a
// lease compare (its parser panics), so it is checked here.
func testTxnCompares(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One member: this test is about what each compare target means, not
	// about reads across members (the chaos suite checks those). Against
	// etcd 3.4.23 under CI's load, the first read-only compare once missed
	// the put of "v2" that had just returned, and the next compare saw it
	// (2026-12-04; not reproduced in three reruns).
	cli := c.newClientAt(t, c.members[0])
	lg, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := cli.Put(ctx, "/cmp/k", "v1", clientv3.WithLease(lg.ID))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := cli.Put(ctx, "/cmp/k", "v2", clientv3.WithIgnoreLease())
	if err != nil {
		t.Fatal(err)
	}
	created, modified := p1.Header.Revision, p2.Header.Revision
	k := "/cmp/k"
	for _, tc := range []struct {
		name string
		cmp  clientv3.Cmp
		want bool
	}{
		{"value =", clientv3.Compare(clientv3.Value(k), "=", "v2"), true},
		{"value !=", clientv3.Compare(clientv3.Value(k), "!=", "v2"), false},
		{"value >", clientv3.Compare(clientv3.Value(k), ">", "v1"), true},
		{"value <", clientv3.Compare(clientv3.Value(k), "<", "v1"), false},
		{"version =", clientv3.Compare(clientv3.Version(k), "=", 2), true},
		{"version >", clientv3.Compare(clientv3.Version(k), ">", 2), false},
		{"create =", clientv3.Compare(clientv3.CreateRevision(k), "=", created), true},
		{"create <", clientv3.Compare(clientv3.CreateRevision(k), "<", created), false},
		{"mod =", clientv3.Compare(clientv3.ModRevision(k), "=", modified), true},
		{"mod !=", clientv3.Compare(clientv3.ModRevision(k), "!=", modified), false},
		{"lease =", clientv3.Compare(clientv3.LeaseValue(k), "=", lg.ID), true},
		{"lease = none", clientv3.Compare(clientv3.LeaseValue(k), "=", clientv3.NoLease), false},
		{"missing key's version = 0", clientv3.Compare(clientv3.Version("/cmp/missing"), "=", 0), true},
		{"missing key's lease = 0", clientv3.Compare(clientv3.LeaseValue("/cmp/missing"), "=", clientv3.NoLease), true},
		{"range: every value > a", clientv3.Compare(clientv3.Value("/cmp/"), ">", "a").WithPrefix(), true},
	} {
		r, err := cli.Txn(ctx).If(tc.cmp).Commit()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if r.Succeeded != tc.want {
			t.Errorf("compare %s: succeeded=%v, want %v", tc.name, r.Succeeded, tc.want)
		}
	}
	// A nested txn in the success branch runs its own compare.
	r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "=", "v2")).Then(
		clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Version(k), "=", 1)},
			[]clientv3.Op{clientv3.OpPut("/cmp/nested", "then")},
			[]clientv3.Op{clientv3.OpPut("/cmp/nested", "else"), clientv3.OpGet(k)},
		),
	).Commit()
	if err != nil {
		t.Fatal(err)
	}
	inner := r.Responses[0].GetResponseTxn()
	if !r.Succeeded || inner == nil || inner.Succeeded || len(inner.Responses) != 2 ||
		string(inner.Responses[1].GetResponseRange().Kvs[0].Value) != "v2" {
		t.Fatalf("nested txn: %+v", r)
	}
	if g, err := cli.Get(ctx, "/cmp/nested"); err != nil || string(g.Kvs[0].Value) != "else" {
		t.Fatalf("nested txn's write: %+v, %v", g, err)
	}
	// A key written twice in one txn is refused with etcd's error.
	_, err = cli.Txn(ctx).Then(clientv3.OpPut("/cmp/d", "1"), clientv3.OpPut("/cmp/d", "2")).Commit()
	if err == nil || err.Error() != rpctypes.ErrDuplicateKey.Error() {
		t.Fatalf("duplicate key in a txn: %v, want %v", err, rpctypes.ErrDuplicateKey)
	}
	// More operations than etcd's default limit (128) are refused.
	var ops []clientv3.Op
	for i := range 129 {
		ops = append(ops, clientv3.OpGet("/cmp/many/"+strconv.Itoa(i)))
	}
	_, err = cli.Txn(ctx).Then(ops...).Commit()
	if err == nil || err.Error() != rpctypes.ErrTooManyOps.Error() {
		t.Fatalf("129 ops in a txn: %v, want %v", err, rpctypes.ErrTooManyOps)
	}
}
