package mvcc

import (
	"encoding/binary"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestRevCacheNeverReadsAheadOfTheView: the revision cache learns of a
// put when it is applied, before its batch commits; a read of the live
// database or of an older snapshot still sees only what is committed in
// its view, and a purged newest version (a compacted tombstone) reads
// as absent.
func TestRevCacheNeverReadsAheadOfTheView(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "v1"))
	snap := h.db.NewSnapshot()
	defer snap.Close()
	value := func(r pebble.Reader, latest bool) string {
		t.Helper()
		req := &dkvpb.RangeRequest{Key: []byte("a")}
		var resp *dkvpb.RangeResponse
		var err error
		if latest {
			resp, err = h.s.RangeLatest(h.db, req)
		} else {
			resp, err = h.s.Range(r, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return "<absent>"
		}
		return string(resp.Kvs[0].Value)
	}

	b := h.db.NewIndexedBatch()
	if res := h.s.Apply(b, putReq("a", "v2")); res.Err != nil {
		t.Fatal(res.Err)
	}
	if rev, ok := h.s.revs.get([]byte("a")); !ok || rev != h.s.Revision() {
		t.Fatalf("revision cache after applying a put: %d %v, want %d", rev, ok, h.s.Revision())
	}
	if got := value(h.db, true); got != "v1" {
		t.Fatalf("live read before the batch commits: %q, want v1", got)
	}
	if got := value(h.db, false); got != "v1" {
		t.Fatalf("read of the database before the batch commits: %q, want v1", got)
	}
	h.s.BeginCommit()
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	h.s.EndCommit()
	b.Close()
	if got := value(h.db, true); got != "v2" {
		t.Fatalf("live read after the commit: %q, want v2", got)
	}
	if got := value(snap, false); got != "v1" {
		t.Fatalf("read of a snapshot taken before the put: %q, want v1", got)
	}

	h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a")}))
	h.mustApply(compactReq(h.s.Revision()))
	if err := h.s.PurgeHistory(h.db, h.s.Revision()); err != nil {
		t.Fatal(err)
	}
	if got := value(h.db, true); got != "<absent>" {
		t.Fatalf("after delete, compact and purge: %q, want absent", got)
	}
	h.mustApply(putReq("a", "v3"))
	if got := value(h.db, true); got != "v3" {
		t.Fatalf("after a put again: %q, want v3", got)
	}

	if err := h.s.Reload(h.db); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.s.revs.get([]byte("a")); ok {
		t.Fatal("the revision cache kept an entry across Reload (a snapshot install)")
	}
	if got := value(h.db, true); got != "v3" {
		t.Fatalf("after Reload: %q, want v3", got)
	}
}

// TestRevCacheIsBounded: past its budget a shard is emptied, so the
// cache holds at most revCacheShards*revCacheShardBytes, and what it
// still holds is right.
func TestRevCacheIsBounded(t *testing.T) {
	c := newRevCache()
	const n = 1 << 20 // 1M keys of 8 bytes: more than the cache holds
	key := make([]byte, 8)
	for i := range n {
		binary.BigEndian.PutUint64(key, uint64(i))
		c.set(key, int64(i))
	}
	held := 0
	for i := range c.shards {
		sh := &c.shards[i]
		if sh.bytes > revCacheShardBytes {
			t.Fatalf("shard %d holds %d bytes, over its budget of %d", i, sh.bytes, revCacheShardBytes)
		}
		held += len(sh.m)
	}
	if held == 0 || held >= n {
		t.Fatalf("the cache holds %d of %d keys, want some but not all", held, n)
	}
	for i := 0; i < n; i += 997 {
		binary.BigEndian.PutUint64(key, uint64(i))
		if rev, ok := c.get(key); ok && rev != int64(i) {
			t.Fatalf("key %d: cached revision %d", i, rev)
		}
	}
}
