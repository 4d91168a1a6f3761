package recipe_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// syncWaitKeys polls, with a deadline, until prefix holds n keys.
func syncWaitKeys(t *testing.T, c *client.Client, prefix string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rr, err := c.List(context.Background(), prefix, client.WithCountOnly())
		if err == nil && rr.Count == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %d keys (%v, %v)", prefix, n, rr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRWMutexNoWriterStarvation: readers share the lock; a writer that
// queues behind them waits for them, and a reader arriving after the
// writer waits for the writer (no starvation), in FIFO order.
func TestRWMutexNoWriterStarvation(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	mk := func() *recipe.RWMutex {
		m, err := recipe.NewRWMutex(syncTestSession(t, c), "rw/doc")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	r1, r2, w, r3 := mk(), mk(), mk(), mk()
	if err := r1.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.RLock(ctx); err != nil { // readers share
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	done := make(chan struct{}, 2)
	go func() {
		if err := w.Lock(ctx); err != nil {
			t.Error(err)
		}
		mu.Lock()
		order = append(order, "w")
		mu.Unlock()
		done <- struct{}{}
	}()
	syncWaitKeys(t, c, "rw/doc/q/", 3)
	go func() {
		if err := r3.RLock(ctx); err != nil {
			t.Error(err)
		}
		mu.Lock()
		order = append(order, "r3")
		mu.Unlock()
		done <- struct{}{}
	}()
	syncWaitKeys(t, c, "rw/doc/q/", 4)
	select {
	case <-done:
		t.Fatalf("%v got the lock while two readers held it", order)
	default:
	}
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	<-done
	// The writer holds alone: r3 is still waiting.
	syncWaitKeys(t, c, "rw/doc/q/", 2)
	mu.Lock()
	if len(order) != 1 || order[0] != "w" {
		t.Fatalf("order %v, want the writer first", order)
	}
	mu.Unlock()
	// The writer's fence holds while it holds the lock.
	tr, err := c.Txn(ctx).If(w.Held()).Then(client.OpPut("rw/doc/data", []byte("v2"))).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("fenced write by the holder: %+v %v", tr, err)
	}
	fence := w.Held()
	_ = w.Unlock(ctx)
	<-done
	if tr, err := c.Txn(ctx).If(fence).Then(client.OpPut("rw/doc/data", []byte("late"))).Commit(); err != nil || tr.Succeeded {
		t.Fatalf("fenced write after unlock applied: %+v %v", tr, err)
	}
	_ = r3.Unlock(ctx)
}
