package recipe_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// TestCacheWaitForRevisionWaitsForHandlers: WaitForRevision(rev) returns
// only once the handlers for rev have returned, so a writer that waits
// for its own write sees what the handlers did with it (the resync test
// read the handler log right after the wait and, on a loaded machine,
// found it empty).
func TestCacheWaitForRevisionWaitsForHandlers(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var done atomic.Bool
	h := recipe.CacheHandler{OnAdd: func(kv *client.KeyValue) {
		if kv.Key != "w/slow" {
			return
		}
		entered <- struct{}{}
		<-release
		done.Store(true)
	}}
	cache, err := recipe.NewCache(ctx, c, "w/", recipe.WithCacheHandler(h))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before Close, which waits for the handler
	rev := mustPut(t, c, "w/slow", "1")
	<-entered // the handler for rev is running, and holds on
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = cache.WaitForRevision(wctx, rev)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForRevision while the handler for revision %d still runs: %v; want it to wait (deadline exceeded)", rev, err)
	}
	unblock()
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if !done.Load() {
		t.Fatal("WaitForRevision returned before the handler had returned")
	}
}
