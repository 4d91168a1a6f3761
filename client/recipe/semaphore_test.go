package recipe_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
)

func syncTestSession(t testing.TB, c *client.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(syncTestCtx(t), c, concurrency.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// semHolding is what one holder logged of one permit: its slot and token,
// and the revisions of the writes it made fenced by the permit.
type semHolding struct {
	worker, slot int
	token        int64
	first, last  int64
}

// TestSemaphoreNeverOverN: many workers contend for 3 permits; from the
// holders' own logs (revisions of writes fenced by their permits) no
// revision ever had more than 3 permits in use.
func TestSemaphoreNeverOverN(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	const n, workers, rounds = 3, 12, 4
	var (
		mu   sync.Mutex
		logs []semHolding
		wg   sync.WaitGroup
	)
	for w := range workers {
		sem, err := recipe.NewSemaphore(syncTestSession(t, c), "sem/printers", n)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				p, err := sem.Acquire(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				h := semHolding{worker: w, slot: p.Slot, token: p.Token()}
				for k := range 8 {
					pr, err := c.Put(ctx, fmt.Sprintf("sem/printers-work/%d", w), []byte(fmt.Sprint(r, k)), client.WithLock(p.Handle))
					if err != nil {
						t.Errorf("worker %d: fenced write with a held permit: %v", w, err)
						return
					}
					if h.first == 0 {
						h.first = pr.Revision
					}
					h.last = pr.Revision
				}
				mu.Lock()
				logs = append(logs, h)
				mu.Unlock()
				if err := p.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(logs) != workers*rounds {
		t.Fatalf("%d holdings logged, want %d", len(logs), workers*rounds)
	}
	// Sweep revisions: +1 at a semHolding's first write, -1 after its last.
	type edge struct {
		rev   int64
		delta int
	}
	var edges []edge
	for _, h := range logs {
		edges = append(edges, edge{h.first, +1}, edge{h.last + 1, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].rev != edges[j].rev {
			return edges[i].rev < edges[j].rev
		}
		return edges[i].delta < edges[j].delta
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
		if cur > n {
			t.Fatalf("%d permits in use at revision %d, more than %d", cur, e.rev, n)
		}
	}
	t.Logf("peak %d permits in use", peak)
	if peak < 2 {
		t.Fatalf("at most %d permit in use at once: the test exercised no concurrency", peak)
	}
	// Per slot, tokens only grow and holdings do not overlap.
	bySlot := map[int][]semHolding{}
	for _, h := range logs {
		bySlot[h.slot] = append(bySlot[h.slot], h)
	}
	for slot, hs := range bySlot {
		sort.Slice(hs, func(i, j int) bool { return hs[i].first < hs[j].first })
		for i := 1; i < len(hs); i++ {
			if hs[i].token <= hs[i-1].token || hs[i].first <= hs[i-1].last {
				t.Fatalf("slot %d: semHolding %+v after %+v", slot, hs[i], hs[i-1])
			}
		}
	}
}

// TestSemaphoreFIFO: with one permit held, waiters get it in the order
// they queued.
func TestSemaphoreFIFO(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	mk := func() *recipe.Semaphore {
		s, err := recipe.NewSemaphore(syncTestSession(t, c), "sem/one", 1)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b, d := mk(), mk(), mk()
	pa, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	queued := func(k int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			rr, err := c.List(ctx, "sem/one/q/", client.WithCountOnly())
			if err == nil && rr.Count == k {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue never reached %d waiters (%v, %v)", k, rr, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	got := make(chan string, 2)
	permits := make(chan *recipe.Permit, 2)
	go func() { p, err := b.Acquire(ctx); got <- fmt.Sprint("b ", err); permits <- p }()
	queued(2)
	go func() { p, err := d.Acquire(ctx); got <- fmt.Sprint("d ", err); permits <- p }()
	queued(3)
	if err := pa.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if first := <-got; first != "b <nil>" {
		t.Fatalf("first after release: %q, want b", first)
	}
	pb := <-permits
	if pb.Token() <= pa.Token() {
		t.Fatalf("token %d after %d: tokens must grow", pb.Token(), pa.Token())
	}
	select {
	case g := <-got:
		t.Fatalf("%q got a permit while b held the only one", g)
	default:
	}
	if err := pb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if second := <-got; second != "d <nil>" {
		t.Fatalf("second: %q", second)
	}
	// A cancelled wait leaves the queue.
	pd := <-permits
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := a.Acquire(wctx); done <- err }()
	queued(2)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled Acquire succeeded")
	}
	queued(1)
	_ = pd.Release(ctx)
}
