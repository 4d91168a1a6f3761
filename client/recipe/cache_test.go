package recipe_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// cacheLog records a cache's handler calls as lines.
type cacheLog struct {
	mu    sync.Mutex
	lines []string
	revs  []int64 // ModRevision (delete: the cache's revision is not known; 0)
}

func (l *cacheLog) handler() recipe.CacheHandler {
	add := func(s string, rev int64) {
		l.mu.Lock()
		l.lines = append(l.lines, s)
		l.revs = append(l.revs, rev)
		l.mu.Unlock()
	}
	return recipe.CacheHandler{
		OnAdd: func(kv *client.KeyValue) { add(fmt.Sprintf("add %s=%s", kv.Key, kv.Value), kv.ModRevision) },
		OnUpdate: func(old, cur *client.KeyValue) {
			add(fmt.Sprintf("update %s %s->%s", cur.Key, old.Value, cur.Value), cur.ModRevision)
		},
		OnDelete: func(old *client.KeyValue) { add(fmt.Sprintf("delete %s", old.Key), 0) },
	}
}

// takeAfterWait is take for after WaitForRevision, which may return
// while the handlers of its last batch are still being called: it waits
// (up to 10s) for the want lines to be there, so a slow handler
// goroutine does not fail the test, and a missing call still does.
func (l *cacheLog) takeAfterWait(t *testing.T, want []string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		n := len(l.lines)
		l.mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			return l.take()
		}
		time.Sleep(time.Millisecond)
	}
}

// sameLinesAfterWait is sameLines over log.takeAfterWait.
func sameLinesAfterWait(t *testing.T, what string, log *cacheLog, want []string) {
	t.Helper()
	sameLines(t, what, log.takeAfterWait(t, want), want)
}

func (l *cacheLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

func mustPut(t *testing.T, c client.KV, key, val string) int64 {
	t.Helper()
	r, err := c.Put(context.Background(), key, []byte(val))
	if err != nil {
		t.Fatal(err)
	}
	return r.Revision
}

func mustDelete(t *testing.T, c client.KV, key string) int64 {
	t.Helper()
	r, err := c.Delete(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return r.Revision
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\ngot:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// checkCacheMatches: the cache's contents equal a read of the prefix at
// the cache's revision.
func checkCacheMatches(t *testing.T, c client.KV, cache *recipe.Cache, prefix string) {
	t.Helper()
	rev := cache.Revision()
	rr, err := c.List(context.Background(), prefix, client.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	got := cache.List(prefix)
	if len(got) != len(rr.KVs) {
		t.Fatalf("cache at %d holds %d keys, the store %d", rev, len(got), len(rr.KVs))
	}
	for i, kv := range rr.KVs {
		if got[i].Key != kv.Key || string(got[i].Value) != string(kv.Value) || got[i].ModRevision != kv.ModRevision {
			t.Fatalf("cache at %d: %s=%s@%d, store %s=%s@%d", rev, got[i].Key, got[i].Value, got[i].ModRevision, kv.Key, kv.Value, kv.ModRevision)
		}
	}
}

// TestCacheHandlersSeeEveryChangeOnce: the snapshot arrives as OnAdd in
// key order, then each change once, in revision order; keys outside the
// prefix are not seen; Get and List serve the latest state.
func TestCacheHandlersSeeEveryChangeOnce(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	mustPut(t, c, "app/b", "1")
	mustPut(t, c, "app/a", "1")
	mustPut(t, c, "apq", "outside")
	var log cacheLog
	cache, err := recipe.NewCache(ctx, c, "app/", recipe.WithCacheHandler(log.handler()))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	sameLines(t, "snapshot", log.take(), []string{"add app/a=1", "add app/b=1"})

	mustPut(t, c, "app/c", "1")
	mustPut(t, c, "app/a", "2")
	mustPut(t, c, "other", "x")
	mustDelete(t, c, "app/b")
	tr, err := c.Txn(ctx).Then(client.OpPut("app/d", []byte("1")), client.OpPut("app/c", []byte("2"))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.WaitForRevision(ctx, tr.Revision); err != nil {
		t.Fatal(err)
	}
	sameLinesAfterWait(t, "changes", &log, []string{
		"add app/c=1", "update app/a 1->2", "delete app/b", "add app/d=1", "update app/c 1->2",
	})
	if kv, ok := cache.Get("app/c"); !ok || string(kv.Value) != "2" {
		t.Fatalf("Get(app/c) = %v, %v", kv, ok)
	}
	if _, ok := cache.Get("app/b"); ok {
		t.Fatal("deleted app/b still cached")
	}
	checkCacheMatches(t, c, cache, "app/")
}

// TestCacheConcurrentWriters: with many writers racing, every put reaches
// the handlers exactly once, in revision order, and the cache equals the
// store at its revision.
func TestCacheConcurrentWriters(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	var log cacheLog
	cache, err := recipe.NewCache(ctx, c, "w/", recipe.WithCacheHandler(log.handler()))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	const writers, puts = 8, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last int64
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < puts; j++ {
				r, err := c.Put(ctx, fmt.Sprintf("w/k%d", (i+j)%5), []byte(fmt.Sprintf("%d-%d", i, j)))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				last = max(last, r.Revision)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := cache.WaitForRevision(ctx, last); err != nil {
		t.Fatal(err)
	}
	// WaitForRevision may return while the last batch's handlers run.
	log.takeAfterWait(t, make([]string, writers*puts))
	log.mu.Lock()
	revs := append([]int64(nil), log.revs...)
	log.mu.Unlock()
	if len(revs) != writers*puts {
		t.Fatalf("handlers saw %d changes, %d puts were made", len(revs), writers*puts)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("change %d at revision %d after %d", i, revs[i], revs[i-1])
		}
	}
	checkCacheMatches(t, c, cache, "w/")
}

// TestCacheWaitForRevisionReadsOwnWrite: after a put, WaitForRevision of
// its revision makes the value visible in the cache; a revision made
// outside the prefix is reached too (by a progress notification).
func TestCacheWaitForRevisionReadsOwnWrite(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	cache, err := recipe.NewCache(ctx, c, "cfg/")
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	for i := 0; i < 20; i++ {
		v := fmt.Sprint(i)
		rev := mustPut(t, c, "cfg/x", v)
		if err := cache.WaitForRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
		if kv, ok := cache.Get("cfg/x"); !ok || string(kv.Value) != v {
			t.Fatalf("after WaitForRevision(%d): Get = %v, %v; want %s", rev, kv, ok, v)
		}
	}
	rev := mustPut(t, c, "elsewhere", "1")
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if got := cache.Revision(); got < rev {
		t.Fatalf("Revision() = %d after waiting for %d", got, rev)
	}
	cache.Close()
	if err := cache.WaitForRevision(ctx, rev+100); err == nil {
		t.Fatal("WaitForRevision on a closed cache returned nil")
	}
}

// cuttableWatcher lets a test end the cache's watch (a lost connection
// that the watch could not bridge) and hold its reopening back until the
// test has changed the store.
type cuttableWatcher struct {
	client.Watcher
	mu      sync.Mutex
	cancels []context.CancelFunc
	gate    chan struct{}
	opens   int
}

func (g *cuttableWatcher) WatchPrefix(ctx context.Context, prefix string, opts ...client.WatchOption) (*client.Watch, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := g.Watcher.WatchPrefix(wctx, prefix, opts...)
	g.mu.Lock()
	g.opens++
	g.cancels = append(g.cancels, cancel)
	g.mu.Unlock()
	if err != nil {
		cancel()
	}
	return w, err
}

// cut ends every open watch and holds new ones until the returned
// function is called.
func (g *cuttableWatcher) cut() (release func()) {
	gate := make(chan struct{})
	g.mu.Lock()
	g.gate = gate
	for _, c := range g.cancels {
		c()
	}
	g.cancels = nil
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.gate = nil
		g.mu.Unlock()
		close(gate)
	}
}

// TestCacheResyncAfterCompaction: the cache loses its watch, the store
// changes and compacts past the cache's revision; the cache resyncs from
// a new snapshot and the handlers see exactly the differences: one call
// per key that really changed, none for an untouched key or for a key
// created and deleted meanwhile, none repeated.
func TestCacheResyncAfterCompaction(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	for _, k := range []string{"a", "b", "keep", "same"} {
		mustPut(t, c, "r/"+k, "1")
	}
	var log cacheLog
	w := &cuttableWatcher{Watcher: c}
	cache, err := recipe.NewCache(ctx, w, "r/", recipe.WithCacheHandler(log.handler()))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	rev := mustPut(t, c, "r/a", "2")
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	sameLinesAfterWait(t, "before the cut", &log, []string{"add r/a=1", "add r/b=1", "add r/keep=1", "add r/same=1", "update r/a 1->2"})

	release := w.cut()
	mustPut(t, c, "r/a", "3")
	mustPut(t, c, "r/a", "4")
	mustDelete(t, c, "r/b")
	mustPut(t, c, "r/c", "1")
	mustPut(t, c, "r/gone", "1")
	mustDelete(t, c, "r/gone")
	rev = mustPut(t, c, "r/keep", "1") // same value, new version: a real update
	if err := c.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	release()
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	sameLinesAfterWait(t, "resync", &log, []string{"update r/a 2->4", "delete r/b", "add r/c=1", "update r/keep 1->1"})
	if n := cache.Resyncs(); n != 1 {
		t.Fatalf("Resyncs() = %d, want 1", n)
	}
	checkCacheMatches(t, c, cache, "r/")

	// It follows live changes again, each once.
	rev = mustPut(t, c, "r/c", "2")
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	sameLinesAfterWait(t, "after the resync", &log, []string{"update r/c 1->2"})
}

// TestCacheResumeWithoutCompaction: a lost watch whose history is still
// there is resumed after the cache's revision, without a snapshot and
// without repeating or missing a change.
func TestCacheResumeWithoutCompaction(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	var log cacheLog
	w := &cuttableWatcher{Watcher: c}
	cache, err := recipe.NewCache(ctx, w, "s/", recipe.WithCacheHandler(log.handler()))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	rev := mustPut(t, c, "s/a", "1")
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	release := w.cut()
	mustPut(t, c, "s/a", "2")
	mustPut(t, c, "s/a", "3")
	rev = mustDelete(t, c, "s/a")
	release()
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	sameLinesAfterWait(t, "resumed", &log, []string{"add s/a=1", "update s/a 1->2", "update s/a 2->3", "delete s/a"})
	if n := cache.Resyncs(); n != 0 {
		t.Fatalf("Resyncs() = %d, want 0 (history was there)", n)
	}
}
