package mvcc

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestLatestCacheForgetsAtReload: a snapshot install replaces the state
// under the store; a put after it must replace the version the new state
// holds, not the one the apply goroutine remembers writing before.
func TestLatestCacheForgetsAtReload(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("k", "mine"))

	// Another member's state: k written twice.
	other := newHarness(t)
	other.mustApply(putReq("pad", "x"))
	other.mustApply(putReq("k", "theirs-1"))
	other.mustApply(putReq("k", "theirs-2"))

	// Install it in h's database, as a snapshot install does, and reload.
	b := h.db.NewBatch()
	it, err := h.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err := b.Delete(bytes.Clone(it.Key()), nil); err != nil {
			t.Fatal(err)
		}
	}
	it.Close()
	it, err = other.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err := b.Set(bytes.Clone(it.Key()), bytes.Clone(it.Value()), nil); err != nil {
			t.Fatal(err)
		}
	}
	it.Close()
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Reload(h.db); err != nil {
		t.Fatal(err)
	}

	res := h.mustApply(putReq("k", "after", func(p *dkvpb.PutRequest) { p.PrevKv = true }))
	prev := res.Resp.(*dkvpb.PutResponse).PrevKv
	if prev == nil || string(prev.Value) != "theirs-2" || prev.Version != 2 {
		t.Fatalf("prev_kv after the install = %v, want theirs-2 at version 2", prev)
	}
	if got := h.get("k"); got == nil || got.Version != 3 || got.CreateRevision != prev.CreateRevision {
		t.Fatalf("k after the put = %v, want version 3 created at %d", got, prev.CreateRevision)
	}
}

// TestLatestCacheAgreesWithTheStore: across puts, deletes, counters,
// txns, lease revokes and values too big to keep, every write replaces
// the version a fresh read of the database returns.
func TestLatestCacheAgreesWithTheStore(t *testing.T) {
	h := newHarness(t)
	big := string(bytes.Repeat([]byte("v"), latestMaxValue+1))
	for i := range 200 {
		key := fmt.Sprintf("k%d", i%7)
		switch i % 5 {
		case 0, 1:
			v := fmt.Sprint(i)
			if i%11 == 0 {
				v = big
			}
			h.mustApply(putReq(key, v))
			if _, _, ok := h.s.latest.get([]byte(key)); ok && v == big {
				t.Fatalf("step %d: the cache kept a value over latestMaxValue", i)
			}
		case 2:
			h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte(key)}))
		case 3:
			h.mustApply(txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut(key, "t"), opDel(fmt.Sprintf("k%d", (i+1)%7))}}))
		case 4:
			h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte(key)}))
			h.mustApply(counterReq(&dkvpb.CounterRequest{Key: []byte(key), Delta: int64(i)}))
		}
		for j := range 7 {
			key := []byte(fmt.Sprintf("k%d", j))
			rec, live, ok := h.s.latest.get(key)
			if !ok {
				continue
			}
			want, wantLive, err := getLatest(h.db, nil, nil, key)
			if err != nil {
				t.Fatal(err)
			}
			if live != wantLive || live && (rec.create != want.create || rec.mod != want.mod || rec.version != want.version || rec.lease != want.lease || !bytes.Equal(rec.value, want.value) || !bytes.Equal(rec.labels, want.labels)) {
				t.Fatalf("step %d: cache has %q = %+v (live %v), the store %+v (live %v)", i, key, rec, live, want, wantLive)
			}
		}
	}
}

// TestLatestCacheIsBounded: past its budget the cache is emptied.
func TestLatestCacheIsBounded(t *testing.T) {
	var c latestCache
	val := make([]byte, 1000)
	for i := range 100_000 { // ~110 MB of entries
		c.put([]byte(fmt.Sprint(i)), &record{value: val})
		if c.bytes > latestCacheBytes {
			t.Fatalf("after %d puts the cache holds %d bytes, over %d", i+1, c.bytes, latestCacheBytes)
		}
	}
	rec, live, ok := c.get([]byte("99999"))
	if !ok || !live || len(rec.value) != 1000 {
		t.Fatal("the newest entry is missing")
	}
	c.put([]byte("99999"), nil)
	if _, live, ok := c.get([]byte("99999")); !ok || live {
		t.Fatal("a delete is not remembered as no version")
	}
}
