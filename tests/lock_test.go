package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/server/servertest"
)

var lockWaiters = flag.Int("lock-waiters", 0, "waiters in TestLockManyWaitersFIFO (default 200 under -race, 1000 otherwise)")

func TestLockAPI(t *testing.T) {
	c3 := newLeaseCluster(t, 3)
	a := servertest.Client(t, c3.Nodes[0])
	b := servertest.Client(t, c3.Nodes[1])
	ctx := ctx10(t)

	ra, err := a.TryAcquire(ctx, "invoice:101", 10*time.Second)
	if err != nil || !ra.Acquired {
		t.Fatalf("first TryAcquire: %+v %v", ra, err)
	}
	h := ra.Handle
	rb, err := b.TryAcquire(ctx, "invoice:101", 10*time.Second)
	if err != nil || rb.Acquired || rb.Holder == nil || *rb.Holder != h {
		t.Fatalf("TryAcquire on a held lock: %+v %v (want held by %v)", rb, err, h)
	}
	parsed, err := client.ParseLockHandle(h.String())
	if err != nil || parsed != h {
		t.Fatalf("handle round trip: %v %v", parsed, err)
	}
	if _, err := client.ParseLockHandle("garbage"); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("parse garbage: %v", err)
	}
	// Unguarded writes to the locked key are refused, guarded ones apply.
	if _, err := b.Put(ctx, "invoice:101", []byte("x")); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("unguarded put: %v", err)
	}
	if _, err := b.Delete(ctx, "invoice:101"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("unguarded delete: %v", err)
	}
	if _, err := b.Put(ctx, "invoice:101", []byte("paid"), client.WithLock(parsed)); err != nil {
		t.Fatalf("put with the handle from another client: %v", err)
	}
	if kv, err := a.Get(ctx, "invoice:101", client.WithLock(h)); err != nil || string(kv.Value) != "paid" {
		t.Fatalf("get under the lock: %v %v", kv, err)
	}
	// Txn compare on ownership.
	tr, err := a.Txn(ctx).If(client.LockHeld(h)).Then(client.OpPut("invoice:101", []byte("txn"), client.WithLock(h))).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("txn LockHeld: %+v %v", tr, err)
	}
	info, err := b.DescribeLock(ctx, "invoice:101")
	if err != nil || info.Holder == nil || *info.Holder != h || info.Remaining <= 0 || info.Remaining > 10*time.Second {
		t.Fatalf("describe: %+v %v", info, err)
	}
	if ttl, err := a.Renew(ctx, h); err != nil || ttl != 10*time.Second {
		t.Fatalf("renew: %v %v", ttl, err)
	}

	// A waiter whose context ends leaves the queue.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Acquire(wctx, "invoice:101", 10*time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, client.ErrUnknownOutcome) {
		t.Logf("cancelled Acquire returned %v", err)
	}
	c3.Eventually(5*time.Second, "cancelled waiter leaves the queue", func() bool {
		info, err := a.DescribeLock(ctx, "invoice:101")
		return err == nil && info.QueueLength == 0
	})

	// A real waiter gets the lock on release, with a larger token.
	got := make(chan client.LockHandle, 1)
	go func() {
		h2, err := b.Acquire(ctx, "invoice:101", 10*time.Second)
		if err != nil {
			t.Errorf("waiting Acquire: %v", err)
		}
		got <- h2
	}()
	c3.Eventually(5*time.Second, "waiter queued", func() bool {
		info, err := a.DescribeLock(ctx, "invoice:101")
		return err == nil && info.QueueLength == 1
	})
	if err := a.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	h2 := <-got
	if h2.Token <= h.Token {
		t.Fatalf("token %d after %d", h2.Token, h.Token)
	}
	if err := a.Release(ctx, h); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("second release of a stale handle: %v", err)
	}
	if _, err := a.Put(ctx, "other", []byte("fenced"), client.WithLock(h)); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("stale handle as a fence: %v", err)
	}
	if _, err := b.Put(ctx, "other", []byte("fenced"), client.WithLock(h2)); err != nil {
		t.Fatalf("current handle as a fence: %v", err)
	}
	if tr, err := a.Txn(ctx).If(client.LockHeld(h)).Then(client.OpPut("invoice:101", []byte("no"))).Commit(); err != nil || tr.Succeeded {
		t.Fatalf("txn LockHeld on a stale handle: %+v %v", tr, err)
	}
	if err := b.Release(ctx, h2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "invoice:101", []byte("free")); err != nil {
		t.Fatalf("put after release: %v", err)
	}
}

// TestLockPause is the Jepsen scenario etcd's advisory locks fail: A takes
// the lock with a 2s TTL and stops renewing (a GC or SIGSTOP pause); B gets
// it after it expires and writes; A wakes and writes with its old handle.
// The store must refuse A's write, also when the raft leader dies during
// A's pause.
func TestLockPause(t *testing.T) {
	for _, killLeader := range []bool{false, true} {
		t.Run(fmt.Sprintf("killLeader=%v", killLeader), func(t *testing.T) {
			c3 := newLeaseCluster(t, 3)
			a := servertest.Client(t, c3.Nodes...)
			b := servertest.Client(t, c3.Nodes...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			ra, err := a.TryAcquire(ctx, "order:123", 2*time.Second)
			if err != nil || !ra.Acquired {
				t.Fatalf("A acquire: %+v %v", ra, err)
			}
			hA := ra.Handle
			if _, err := a.Put(ctx, "order:123", []byte("A-start"), client.WithLock(hA)); err != nil {
				t.Fatal(err)
			}
			if killLeader {
				c3.Stop(c3.WaitLeader())
				c3.WaitLeader()
			}
			// A is paused: no renewals. B waits in the queue.
			hB, err := b.Acquire(ctx, "order:123", 10*time.Second)
			if err != nil {
				t.Fatalf("B acquire: %v", err)
			}
			if hB.Token <= hA.Token {
				t.Fatalf("B's token %d not above A's %d", hB.Token, hA.Token)
			}
			if _, err := b.Put(ctx, "order:123", []byte("B"), client.WithLock(hB)); err != nil {
				t.Fatalf("B write: %v", err)
			}
			// A wakes up.
			if _, err := a.Put(ctx, "order:123", []byte("A-late"), client.WithLock(hA)); !errors.Is(err, client.ErrLocked) {
				t.Fatalf("A's late write: %v, want ErrLocked", err)
			}
			if _, err := a.Put(ctx, "order:123", []byte("A-unguarded")); !errors.Is(err, client.ErrLocked) {
				t.Fatalf("A's unguarded write: %v, want ErrLocked", err)
			}
			if _, err := a.Get(ctx, "order:123", client.WithLock(hA)); !errors.Is(err, client.ErrLocked) {
				t.Fatalf("A's read under its stale handle: %v, want ErrLocked", err)
			}
			kv, err := a.Get(ctx, "order:123")
			if err != nil || string(kv.Value) != "B" {
				t.Fatalf("final value %v %v, want B", kv, err)
			}
		})
	}
}

// TestLockManyWaitersFIFO: waiters queued one after another are granted in
// that order, each exactly once, never two at a time.
func TestLockManyWaitersFIFO(t *testing.T) {
	n := *lockWaiters
	if n == 0 {
		n = 1000
		if lockRaceEnabled {
			n = 200
		}
	}
	c3 := newLeaseCluster(t, 3)
	c := servertest.Client(t, c3.Nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const key = "jobs:lock"
	first, err := c.TryAcquire(ctx, key, 0, client.WithLockLease(s.Lease()))
	if err != nil || !first.Acquired {
		t.Fatal(first, err)
	}
	var (
		mu     sync.Mutex
		order  []int
		tokens []int64
		wg     sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			h, err := c.Acquire(ctx, key, 0, client.WithLockLease(s.Lease()), client.WithLockOwner(fmt.Sprintf("w%04d", i)))
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			tokens = append(tokens, h.Token)
			mu.Unlock()
			// Read-modify-write under the lock: a duplicate grant would
			// lose an increment.
			v := int64(0)
			if kv, err := c.Get(ctx, "jobs:count", client.WithLock(h)); err == nil {
				v, _ = strconv.ParseInt(string(kv.Value), 10, 64)
			} else if !errors.Is(err, client.ErrNotFound) {
				t.Errorf("waiter %d get: %v", i, err)
			}
			if _, err := c.Put(ctx, "jobs:count", []byte(strconv.FormatInt(v+1, 10)), client.WithLock(h)); err != nil {
				t.Errorf("waiter %d put: %v", i, err)
			}
			if err := c.Release(ctx, h); err != nil {
				t.Errorf("waiter %d release: %v", i, err)
			}
		}(i)
		// Queue them in a known order.
		deadline := time.Now().Add(10 * time.Second)
		for {
			info, err := c.DescribeLock(ctx, key)
			if err == nil && info.QueueLength == int64(i+1) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued: %+v %v", i, info, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := c.Release(ctx, first.Handle); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != n {
		t.Fatalf("%d grants, want %d", len(order), n)
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("grant %d went to waiter %d (order %v...)", i, w, order[:min(i+5, n)])
		}
		if i > 0 && tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d", tokens[i], tokens[i-1])
		}
	}
	kv, err := c.Get(ctx, "jobs:count")
	if err != nil || string(kv.Value) != strconv.Itoa(n) {
		t.Fatalf("count %v %v, want %d", kv, err, n)
	}
}

// TestElectionFailover: three candidates; the leader's session is lost
// (its process "dies": keep-alives stop); another leads with a larger
// term, observers see it, and the old leader's fenced writes are refused.
func TestElectionFailover(t *testing.T) {
	c3 := newLeaseCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "svc/leader"
	type cand struct {
		s *concurrency.Session
		l *concurrency.Leadership
	}
	cands := make([]*cand, 3)
	won := make(chan int, 3)
	for i := range cands {
		c := servertest.Client(t, c3.Nodes[i])
		s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		cands[i] = &cand{s: s}
		go func(i int) {
			l, err := concurrency.NewElection(s, name).Campaign(ctx, []byte(fmt.Sprintf("node-%d", i)))
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("campaign %d: %v", i, err)
				}
				return
			}
			cands[i].l = l
			won <- i
		}(i)
	}
	obsClient := servertest.Client(t, c3.Nodes...)
	obs := concurrency.Observe(ctx, obsClient, name)

	first := <-won
	old := cands[first].l
	ev := waitObserved(t, obs, old.Term())
	if string(ev.Value) != fmt.Sprintf("node-%d", first) {
		t.Fatalf("observed %q, want node-%d", ev.Value, first)
	}
	if err := old.Proclaim(ctx, []byte("still me")); err != nil {
		t.Fatal(err)
	}
	if _, err := obsClient.Put(ctx, "svc/config", []byte("v1"), client.WithLock(old.Handle())); err != nil {
		t.Fatalf("leader's fenced write: %v", err)
	}
	// The leader's process dies: its keep-alives stop, its lease expires.
	cands[first].s.Orphan()
	var second int
	select {
	case second = <-won:
	case <-ctx.Done():
		t.Fatal("no new leader")
	}
	nl := cands[second].l
	if nl.Term() <= old.Term() {
		t.Fatalf("new term %d not above %d", nl.Term(), old.Term())
	}
	ev = waitObserved(t, obs, nl.Term())
	if string(ev.Value) != fmt.Sprintf("node-%d", second) {
		t.Fatalf("observed %q, want node-%d", ev.Value, second)
	}
	if _, err := obsClient.Put(ctx, "svc/config", []byte("old"), client.WithLock(old.Handle())); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("deposed leader's fenced write: %v, want ErrLocked", err)
	}
	if err := old.Proclaim(ctx, []byte("zombie")); !errors.Is(err, client.ErrLocked) && !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("deposed leader's proclaim: %v", err)
	}
	select {
	case <-old.Done():
	case <-ctx.Done():
		t.Fatal("old leadership's Done never closed")
	}
	li, err := concurrency.Leader(ctx, obsClient, name)
	if err != nil || li.Term != nl.Term() {
		t.Fatalf("Leader: %+v %v", li, err)
	}
	// Resign hands over to the last candidate at once.
	if err := nl.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	third := <-won
	if cands[third].l.Term() <= nl.Term() || third == first || third == second {
		t.Fatalf("third leader %d term %d", third, cands[third].l.Term())
	}
}

func waitObserved(t *testing.T, obs <-chan concurrency.LeaderInfo, term int64) concurrency.LeaderInfo {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-obs:
			if !ok {
				t.Fatal("observe channel closed")
			}
			if ev.Term > term {
				t.Fatalf("observed term %d beyond %d", ev.Term, term)
			}
			if ev.Term == term {
				return ev
			}
		case <-timeout:
			t.Fatalf("term %d never observed", term)
		}
	}
}

// TestLockSurvivesRestart: the lock table is durable state: after every
// member restarts, the holder, its enforcement and the token order remain.
func TestLockSurvivesRestart(t *testing.T) {
	c3 := newLeaseCluster(t, 3)
	c := servertest.Client(t, c3.Nodes...)
	ctx := ctx10(t)
	r, err := c.TryAcquire(ctx, "k", 30*time.Second)
	if err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	for _, nd := range c3.Nodes {
		c3.Stop(nd)
	}
	for _, nd := range c3.Nodes {
		c3.Start(nd)
	}
	c3.WaitLeader()
	c2 := servertest.Client(t, c3.Nodes...)
	ctx = ctx10(t)
	info, err := c2.DescribeLock(ctx, "k")
	if err != nil || info.Holder == nil || *info.Holder != r.Handle {
		t.Fatalf("after restart: %+v %v, want holder %v", info, err, r.Handle)
	}
	if _, err := c2.Put(ctx, "k", []byte("x")); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("unguarded put after restart: %v", err)
	}
	if err := c2.Release(ctx, r.Handle); err != nil {
		t.Fatal(err)
	}
	r2, err := c2.TryAcquire(ctx, "k", 30*time.Second)
	if err != nil || !r2.Acquired || r2.Handle.Token <= r.Handle.Token {
		t.Fatalf("re-acquire after restart: %+v %v (old token %d)", r2, err, r.Handle.Token)
	}
}
