package recipe_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// TestDoubleBarrier: nobody gets past Enter until all n have entered,
// nobody past Leave until all have left.
func TestDoubleBarrier(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	const n = 3
	in, out := make(chan int, n), make(chan int, n)
	leave := make(chan struct{})
	var (
		mu          sync.Mutex
		lastLeaving bool
	)
	start := func(i int) {
		d, err := recipe.NewDoubleBarrier(syncTestSession(t, c), "barrier/round1", n)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := d.Enter(ctx); err != nil {
				t.Error(err)
				return
			}
			in <- i
			<-leave
			if i == n-1 {
				return // the last one leaves later
			}
			if err := d.Leave(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			if !lastLeaving {
				t.Errorf("participant %d left before the last one did", i)
			}
			mu.Unlock()
			out <- i
		}()
		if i == n-1 {
			go func() {
				<-leave
				syncWaitKeys(t, c, "barrier/round1/waiters/", 1) // the others have left
				mu.Lock()
				lastLeaving = true
				mu.Unlock()
				if err := d.Leave(ctx); err != nil {
					t.Error(err)
				}
				out <- i
			}()
		}
	}
	for i := range n - 1 {
		start(i)
	}
	syncWaitKeys(t, c, "barrier/round1/waiters/", n-1)
	if len(in) != 0 {
		t.Fatalf("%d passed Enter with %d of %d entered", len(in), n-1, n)
	}
	start(n - 1)
	for range n {
		<-in
	}
	close(leave)
	for range n {
		<-out
	}
	rr, err := c.List(ctx, "barrier/round1/waiters/", client.WithCountOnly())
	if err != nil || rr.Count != 0 {
		t.Fatalf("waiters left behind: %v %v", rr, err)
	}
}

func TestBarrier(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	b := recipe.NewBarrier(c, "barrier/deploy")
	if err := b.Wait(ctx); err != nil { // not raised: passes
		t.Fatal(err)
	}
	if err := b.Hold(ctx, 0); err != nil {
		t.Fatal(err)
	}
	passed := make(chan error, 1)
	go func() { passed <- b.Wait(ctx) }()
	select {
	case err := <-passed:
		t.Fatalf("Wait returned while the barrier was up: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
}
