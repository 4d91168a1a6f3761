package mvcc

import (
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

// An empty store is at revision 1, as etcd's: the first write is revision
// 2, revision 1 can be read, hashed and compacted to, and revision 2 is in
// the future until something is written.
func TestEmptyStoreAtRevisionOne(t *testing.T) {
	h := newHarness(t) // lease grants only: no keyspace change, no revision recorded
	if h.s.Revision() != 1 {
		t.Fatalf("empty store at revision %d, want 1", h.s.Revision())
	}
	// Reopening a store that has no revision recorded reads it as 1.
	s2, err := Open(h.db, Limits{})
	if err != nil || s2.Revision() != 1 || s2.CompactRevision() != 0 {
		t.Fatalf("reopen: %v rev %d compact %d", err, s2.Revision(), s2.CompactRevision())
	}
	resp, err := h.rng(&dkvpb.RangeRequest{Prefix: true, Revision: 1})
	if err != nil || resp.Header.Revision != 1 || len(resp.Kvs) != 0 {
		t.Fatalf("range at revision 1: %v %v", resp, err)
	}
	_, err = h.rng(&dkvpb.RangeRequest{Prefix: true, Revision: 2})
	wantCode(t, err, dkverr.InvalidInput)
	h0, at0, _, err := h.s.HashKV(h.db, 0)
	if err != nil || at0 != 1 {
		t.Fatalf("HashKV(0): rev %d %v", at0, err)
	}
	h1, at1, _, err := h.s.HashKV(h.db, 1)
	if err != nil || at1 != 1 || h1 != h0 {
		t.Fatalf("HashKV(1): %x rev %d %v, want %x rev 1", h1, at1, err, h0)
	}
	// Compacting to revision 1 of an empty store succeeds, as in etcd,
	// and changes no revision; 2 is in the future.
	wantCode(t, h.apply(compactReq(2)).Err, dkverr.InvalidInput)
	if res := h.mustApply(compactReq(1)); res.Revision != 1 || h.s.CompactRevision() != 1 {
		t.Fatalf("compact 1: rev %d compact %d", res.Revision, h.s.CompactRevision())
	}
	wantCode(t, h.apply(compactReq(1)).Err, dkverr.Compacted)
	if resp, err := h.rng(&dkvpb.RangeRequest{Prefix: true, Revision: 1}); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("range at the compact revision 1: %v %v", resp, err)
	}
	res := h.mustApply(putReq("a", "1"))
	if res.Revision != 2 {
		t.Fatalf("first write at revision %d, want 2", res.Revision)
	}
	if kv := h.get("a"); kv.CreateRevision != 2 || kv.ModRevision != 2 {
		t.Fatalf("first key %v, want create and mod revision 2", kv)
	}
	// A recorded revision is kept on reopen.
	s3, err := Open(h.db, Limits{})
	if err != nil || s3.Revision() != 2 || s3.CompactRevision() != 1 {
		t.Fatalf("reopen after a write: %v rev %d compact %d", err, s3.Revision(), s3.CompactRevision())
	}
}
