package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// cacheReplay checks a cache's handler calls as they come: replaying
// them onto an empty map must give the cache's contents, so an OnAdd
// of a key already there, an OnUpdate or OnDelete whose old version is
// not the one replayed, or a key's revision going backwards is a
// duplicated or missed call. It also keeps the calls, to compare with the writes.
type cacheReplay struct {
	mu    sync.Mutex
	model map[string]*client.KeyValue
	calls []string         // "put KEY@REV" for OnAdd/OnUpdate, "delete KEY" for OnDelete
	last  map[string]int64 // per key, the revision of its last put call
	bad   []string
}

func newCacheReplay() *cacheReplay {
	return &cacheReplay{model: map[string]*client.KeyValue{}, last: map[string]int64{}}
}

func (r *cacheReplay) handler() recipe.CacheHandler {
	return recipe.CacheHandler{
		OnAdd: func(kv *client.KeyValue) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if old, ok := r.model[kv.Key]; ok {
				r.bad = append(r.bad, fmt.Sprintf("OnAdd %s@%d, already added @%d", kv.Key, kv.ModRevision, old.ModRevision))
			}
			r.put(kv)
		},
		OnUpdate: func(old, cur *client.KeyValue) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if m, ok := r.model[cur.Key]; !ok || m.ModRevision != old.ModRevision {
				r.bad = append(r.bad, fmt.Sprintf("OnUpdate %s %d->%d, replayed version %v", cur.Key, old.ModRevision, cur.ModRevision, m))
			}
			r.put(cur)
		},
		OnDelete: func(old *client.KeyValue) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if m, ok := r.model[old.Key]; !ok || m.ModRevision != old.ModRevision {
				r.bad = append(r.bad, fmt.Sprintf("OnDelete %s@%d, replayed version %v", old.Key, old.ModRevision, m))
			}
			delete(r.model, old.Key)
			r.calls = append(r.calls, "delete "+old.Key)
		},
	}
}

func (r *cacheReplay) put(kv *client.KeyValue) {
	// A snapshot or a resync comes in key order, so only each key's own
	// revisions must grow.
	if last := r.last[kv.Key]; kv.ModRevision <= last {
		r.bad = append(r.bad, fmt.Sprintf("%s@%d after a call for it at revision %d", kv.Key, kv.ModRevision, last))
	}
	r.last[kv.Key] = kv.ModRevision
	r.model[kv.Key] = kv
	r.calls = append(r.calls, fmt.Sprintf("put %s@%d", kv.Key, kv.ModRevision))
}

// TestCacheOnPartitionedFollowerConverges: a
// cache reading through a follower that is cut off from the cluster and
// then healed converges, with no missed or duplicated handler call.
// Without compaction, its handlers see exactly the writes made, each
// once, in order; with the history compacted while the follower was
// away, the cache resyncs and its handler calls still replay to exactly
// the store's contents.
func TestCacheOnPartitionedFollowerConverges(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compacted=%v", compact), func(t *testing.T) {
			testCachePartition(t, compact)
		})
	}
}

func testCachePartition(t *testing.T, compact bool) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	c3 := servertest.NewCluster(t, 3, server.Config{})
	l := c3.WaitLeader()
	f := c3.Followers()[0]
	var majority []*servertest.Node
	for _, nd := range c3.Nodes {
		if nd != f {
			majority = append(majority, nd)
		}
	}
	reader := servertest.Client(t, f) // the cache's client knows the follower only
	writer := servertest.Client(t, l, majority[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const prefix = "app/"
	var want []string // the writes under the prefix, as the handlers should see them
	write := func(n int) int64 {
		t.Helper()
		var rev int64
		for range n {
			key := fmt.Sprintf("%sk%02d", prefix, rng.IntN(20))
			if rng.IntN(4) == 0 {
				r, err := writer.Delete(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				rev = r.Revision
				if r.Deleted > 0 {
					want = append(want, "delete "+key)
				}
				continue
			}
			r, err := writer.Put(ctx, key, fmt.Appendf(nil, "v%d", rng.IntN(1000)))
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Revision
			want = append(want, fmt.Sprintf("put %s@%d", key, r.Revision))
			if rng.IntN(5) == 0 { // a write outside the prefix
				if _, err := writer.Put(ctx, "other", []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
		}
		return rev
	}

	write(30) // before the cache: its snapshot
	replay := newCacheReplay()
	cache, err := recipe.NewCache(ctx, reader, prefix, recipe.WithCacheHandler(replay.handler()),
		recipe.WithCacheProgressInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	// The snapshot's OnAdds stand for the writes before it.
	replay.mu.Lock()
	want = append([]string(nil), replay.calls...)
	replay.mu.Unlock()

	rev := write(30)
	if err := cache.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	c3.Isolate(f)
	rev = write(150)
	if compact {
		if err := writer.Compact(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	if got := cache.Revision(); got >= rev {
		t.Fatalf("the cache on the isolated follower reached revision %d of %d: the partition did not hold", got, rev)
	}
	behind := cache.Revision()
	c3.Heal()
	rev = write(30)
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := cache.WaitForRevision(wctx, rev); err != nil {
		t.Fatalf("the cache did not reach revision %d after the heal (at %d): %v", rev, cache.Revision(), err)
	}
	t.Logf("cache was at revision %d when healed, caught up to %d; %d resyncs", behind, cache.Revision(), cache.Resyncs())

	// The cache equals a linearizable read at its revision.
	crev := cache.Revision()
	rr, err := reader.List(ctx, prefix, client.WithRev(crev))
	if errors.Is(err, client.ErrCompacted) {
		t.Fatalf("cache revision %d is compacted", crev)
	}
	if err != nil {
		t.Fatal(err)
	}
	got := cache.List(prefix)
	if len(got) != len(rr.KVs) {
		t.Fatalf("cache at %d holds %d keys, the store %d", crev, len(got), len(rr.KVs))
	}
	replay.mu.Lock()
	defer replay.mu.Unlock()
	if len(replay.bad) > 0 {
		t.Fatalf("handler calls that do not replay:\n  %s", strings.Join(replay.bad, "\n  "))
	}
	if len(replay.model) != len(rr.KVs) {
		t.Fatalf("the handler calls replay to %d keys, the store holds %d", len(replay.model), len(rr.KVs))
	}
	for i, kv := range rr.KVs {
		m := replay.model[kv.Key]
		if got[i].Key != kv.Key || string(got[i].Value) != string(kv.Value) || got[i].ModRevision != kv.ModRevision {
			t.Fatalf("cache at %d: %s=%s@%d, store %s=%s@%d", crev, got[i].Key, got[i].Value, got[i].ModRevision, kv.Key, kv.Value, kv.ModRevision)
		}
		if m == nil || m.ModRevision != kv.ModRevision || string(m.Value) != string(kv.Value) {
			t.Fatalf("handler replay of %s is %v, the store has %s@%d", kv.Key, m, kv.Value, kv.ModRevision)
		}
	}
	if compact && cache.Resyncs() > 0 {
		return // a resync folds the writes it skipped: the replay check above is the contract
	}
	if strings.Join(replay.calls, "\n") != strings.Join(want, "\n") {
		t.Fatalf("handler calls differ from the writes (%d calls, %d writes):\ngot:  %s\nwant: %s",
			len(replay.calls), len(want), strings.Join(replay.calls, ", "), strings.Join(want, ", "))
	}
}
