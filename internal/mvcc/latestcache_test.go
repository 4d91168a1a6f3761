package mvcc

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/protobuf/proto"
)

// tinyCache is a latest-record cache small enough that most reads miss,
// entries are evicted all the time and some records are too large for
// it.
func tinyCache() *latestCache { return newLatestCache(3, 3*cacheSlotOverhead+24, 6) }

// noCache caches nothing: every point read goes to Pebble, as before the
// cache existed.
func noCache() *latestCache { return newLatestCache(0, 0, 0) }

// commitApplied commits b into h's database the way raftnode does, and
// returns a new batch.
func commitApplied(t *testing.T, h *harness, b *pebble.Batch) *pebble.Batch {
	t.Helper()
	h.s.BeginCommit()
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	h.s.EndCommit()
	b.Close()
	return h.db.NewIndexedBatch()
}

// copyState replaces dst's state with src's, as a snapshot install does.
func copyState(t *testing.T, src, dst *pebble.DB) {
	t.Helper()
	lo, hi := []byte("s/"), []byte("s0")
	b := dst.NewBatch()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		t.Fatal(err)
	}
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err := b.Set(it.Key(), it.Value(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// TestLatestCacheDifferential feeds the same random commands (puts with
// and without labels and leases, deletes, delete ranges, txns, counters,
// compactions, lease revocations and re-grants) to a store with a tiny
// latest-record cache and to one with none, several commands per batch,
// and checks that every result, response (prev_kv included), event (with
// its PrevKV) and lease change is the same, that every key's cached
// state is what the batch holds, and that both end byte-identical. The
// cached store is reopened, and has a snapshot installed underneath it
// (the uncached one applied commands it missed), along the way.
func TestLatestCacheDifferential(t *testing.T) {
	seed := testSeed(t)
	for run := 0; run < 4; run++ {
		runLatestCacheDifferential(t, seed+int64(run), *stepsFlag)
	}
}

func runLatestCacheDifferential(t *testing.T, seed int64, steps int) {
	rnd := rand.New(rand.NewSource(seed))
	m := newModel()
	g := &gen{rnd: rnd, m: m}
	ref, sut := newHarness(t), newHarness(t)
	ref.s.cache, sut.s.cache = noCache(), tinyCache()
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
	}
	command := func() *dkvpb.InternalRequest {
		switch rnd.Intn(10) {
		case 0:
			p := g.put()
			p.Labels = map[string]string{"s": []string{"a", "bb", "a-long-label-value"}[rnd.Intn(3)]}
			return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: p}}
		case 1:
			p := g.put()
			p.Lease = int64(1 + rnd.Intn(3))
			p.IgnoreLabels = rnd.Intn(3) == 0
			p.IgnoreLease = rnd.Intn(3) == 0
			return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: p}}
		case 2:
			if rnd.Intn(2) == 0 {
				return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: int64(1 + rnd.Intn(3))}}}
			}
			return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: int64(1 + rnd.Intn(3)), TtlMs: 60_000}}}
		}
		return g.command()
	}
	same := func(step int, req *dkvpb.InternalRequest, a, b Result) {
		t.Helper()
		if codeOf(a.Err) != codeOf(b.Err) || a.Revision != b.Revision {
			fail(step, "apply %v: cached %v rev %d, uncached %v rev %d", req, b.Err, b.Revision, a.Err, a.Revision)
		}
		if !proto.Equal(a.Resp, b.Resp) {
			fail(step, "apply %v: response\n cached   %v\n uncached %v", req, b.Resp, a.Resp)
		}
		if len(a.Events) != len(b.Events) {
			fail(step, "apply %v: %d events, uncached %d", req, len(b.Events), len(a.Events))
		}
		for i := range a.Events {
			x, y := a.Events[i], b.Events[i]
			if x.Type != y.Type || !proto.Equal(x.KV, y.KV) || !proto.Equal(x.PrevKV, y.PrevKV) || (x.PrevKV == nil) != (y.PrevKV == nil) {
				fail(step, "apply %v: event %d\n cached   %v %v prev %v\n uncached %v %v prev %v", req, i, y.Type, y.KV, y.PrevKV, x.Type, x.KV, x.PrevKV)
			}
		}
		if !reflect.DeepEqual(a.Leases, b.Leases) {
			fail(step, "apply %v: lease changes %v, uncached %v", req, b.Leases, a.Leases)
		}
	}
	// checkCache: every key's state through the cache is the batch's.
	checkCache := func(step int, b *pebble.Batch) {
		t.Helper()
		w := sut.s.Begin(b)
		for _, k := range genKeys {
			got, gotOK := w.get([]byte(k))
			want, wantOK, err := getLatest(b, nil, []byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if gotOK != wantOK || !reflect.DeepEqual(got, want) {
				fail(step, "key %q: cached %v %+v, batch %v %+v", k, gotOK, got, wantOK, want)
			}
		}
	}
	rb, sb := ref.db.NewIndexedBatch(), sut.db.NewIndexedBatch()
	var totalHits uint64
	for step := 0; step < steps; step++ {
		req := command()
		m.apply(req) // keeps the generator's revisions plausible
		a, b := ref.s.Apply(rb, req), sut.s.Apply(sb, req)
		same(step, req, a, b)
		if rnd.Intn(3) == 0 {
			checkCache(step, sb)
		}
		r := g.rangeReq()
		r.Revision = 0
		x, err1 := ref.s.Range(rb, r)
		y, err2 := sut.s.Range(sb, r)
		if err1 != nil || err2 != nil || !proto.Equal(x, y) {
			fail(step, "range %v: cached %v %v, uncached %v %v", r, y, err2, x, err1)
		}
		switch rnd.Intn(12) {
		case 0, 1, 2, 3:
			rb, sb = commitApplied(t, ref, rb), commitApplied(t, sut, sb)
		case 4:
			rb, sb = commitApplied(t, ref, rb), commitApplied(t, sut, sb)
			s, err := Open(sut.db, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			s.cache = tinyCache()
			hits, _ := sut.s.LatestCacheStats()
			totalHits += hits
			sut.s = s
		case 5:
			// The cached store misses a few commands; then the other's
			// state is installed underneath it, and it is reloaded.
			rb, sb = commitApplied(t, ref, rb), commitApplied(t, sut, sb)
			for i := rnd.Intn(6); i >= 0; i-- {
				req := command()
				m.apply(req)
				ref.s.Apply(rb, req)
			}
			rb = commitApplied(t, ref, rb)
			sut.s.BeginCommit()
			copyState(t, ref.db, sut.db)
			if err := sut.s.Reload(sut.db); err != nil {
				t.Fatal(err)
			}
			if sut.s.Revision() != ref.s.Revision() {
				fail(step, "revision after install %d, want %d", sut.s.Revision(), ref.s.Revision())
			}
			checkCache(step, sb)
		case 6:
			rb, sb = commitApplied(t, ref, rb), commitApplied(t, sut, sb)
			if err := sut.s.PurgeHistory(sut.db, sut.s.CompactRevision()); err != nil {
				t.Fatal(err)
			}
			if err := ref.s.PurgeHistory(ref.db, ref.s.CompactRevision()); err != nil {
				t.Fatal(err)
			}
		}
	}
	commitApplied(t, ref, rb).Close()
	commitApplied(t, sut, sb).Close()
	if d := diffKeyspace(t, ref.db, sut.db); d != "" {
		t.Fatalf("seed %d: %s", seed, d)
	}
	if hits, _ := sut.s.LatestCacheStats(); totalHits+hits == 0 {
		t.Fatalf("seed %d: the cache was never hit", seed)
	}
}

// TestLatestCachePutReadsNothing: a put of a key just written (in an
// earlier batch or the same one) reads its previous record from the
// cache, not from Pebble, and still returns it as prev_kv; a reload
// (snapshot install) makes the next put read Pebble again.
func TestLatestCachePutReadsNothing(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("k", "v1"))
	reads := h.s.latestReads
	res := h.mustApply(putReq("k", "v2", func(p *dkvpb.PutRequest) { p.PrevKv = true }))
	if n := h.s.latestReads - reads; n != 0 {
		t.Fatalf("a put of a key just written read Pebble %d times, want 0", n)
	}
	if prev := res.Resp.(*dkvpb.PutResponse).PrevKv; string(prev.GetValue()) != "v1" || prev.GetVersion() != 1 {
		t.Fatalf("prev_kv %v, want v1 at version 1", prev)
	}
	if ev := res.Events[0]; string(ev.PrevKV.GetValue()) != "v1" || ev.KV.Version != 2 {
		t.Fatalf("event %v", ev)
	}
	// A key deleted is cached as absent.
	h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("k")}))
	reads = h.s.latestReads
	res = h.mustApply(putReq("k", "v3", func(p *dkvpb.PutRequest) { p.PrevKv = true }))
	if n := h.s.latestReads - reads; n != 0 || res.Resp.(*dkvpb.PutResponse).PrevKv != nil {
		t.Fatalf("put after delete: %d Pebble reads, prev_kv %v; want 0 and none", n, res.Resp.(*dkvpb.PutResponse).PrevKv)
	}
	if err := h.s.Reload(h.db); err != nil {
		t.Fatal(err)
	}
	reads = h.s.latestReads
	res = h.mustApply(putReq("k", "v4", func(p *dkvpb.PutRequest) { p.PrevKv = true }))
	if n := h.s.latestReads - reads; n != 1 || string(res.Resp.(*dkvpb.PutResponse).PrevKv.GetValue()) != "v3" {
		t.Fatalf("put after reload: %d Pebble reads, prev_kv %v; want 1 and v3", n, res.Resp.(*dkvpb.PutResponse).PrevKv)
	}
}

// TestLatestCacheDroppedBatch: if a batch the cache saw writes into is
// closed without a commit, the next batch does not read those writes
// from the cache.
func TestLatestCacheDroppedBatch(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("k", "v1"))
	b := h.db.NewIndexedBatch()
	h.s.Apply(b, putReq("k", "v2"))
	b.Close()
	b = h.db.NewIndexedBatch()
	defer b.Close()
	res := h.s.Apply(b, putReq("k", "v3", func(p *dkvpb.PutRequest) { p.PrevKv = true }))
	if prev := res.Resp.(*dkvpb.PutResponse).PrevKv; !bytes.Equal(prev.GetValue(), []byte("v1")) {
		t.Fatalf("prev_kv %v, want the committed v1", prev)
	}
}

// TestLatestCacheBounds: the cache keeps within its entry and byte
// bounds, keeps no record larger than its per-record bound, and a hit
// returns what was stored.
func TestLatestCacheBounds(t *testing.T) {
	c := newLatestCache(8, 8*cacheSlotOverhead+200, 32)
	for i := 0; i < 1000; i++ {
		k := []byte(fmt.Sprintf("key%d", i%50))
		v := bytes.Repeat([]byte{'x'}, i%40)
		c.set(k, &record{create: int64(i), value: v}, i%7 != 0)
		if len(c.idx) > c.maxEntries || c.bytes > c.maxBytes {
			t.Fatalf("step %d: %d entries, %d bytes; bounds %d, %d", i, len(c.idx), c.bytes, c.maxEntries, c.maxBytes)
		}
		rec, live, ok := c.get(k)
		if len(v) > 32 && i%7 != 0 {
			if ok {
				t.Fatalf("step %d: a %d-byte record was cached", i, len(v))
			}
			continue
		}
		if ok && (live != (i%7 != 0) || (live && (rec.create != int64(i) || !bytes.Equal(rec.value, v)))) {
			t.Fatalf("step %d: got %v %+v", i, live, rec)
		}
	}
	n := 0
	for i, s := range c.slots {
		if s.used {
			n++
			if j, ok := c.idx[s.key]; !ok || int(j) != i {
				t.Fatalf("slot %d (%q) not indexed", i, s.key)
			}
		}
	}
	if n != len(c.idx) {
		t.Fatalf("%d used slots, %d indexed", n, len(c.idx))
	}
}
