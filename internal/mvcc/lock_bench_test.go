package mvcc

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// BenchmarkLockAcquireRelease applies an uncontended acquire and its
// release (two entries) per op, the way `dkv bench lock` drives a member,
// committing every 128 ops as an apply batch would.
func BenchmarkLockAcquireRelease(b *testing.B) {
	h := newHarness(b)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("lock/%04d", i)
	}
	batch := h.db.NewIndexedBatch()
	defer func() { batch.Close() }()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := h.s.Apply(batch, acquireReq(keys[i%len(keys)], fmt.Sprintf("o%d", i), 1, true))
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		hd := r.Resp.(*dkvpb.LockAcquireResponse).Handle
		if hd == nil {
			b.Fatal("not granted")
		}
		if r := h.s.Apply(batch, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockRelease{LockRelease: &dkvpb.LockReleaseRequest{Handle: hd}}}); r.Err != nil || !r.Resp.(*dkvpb.LockReleaseResponse).Released {
			b.Fatal("release", r.Err)
		}
		if i%128 == 127 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			batch = h.db.NewIndexedBatch()
		}
	}
}

// BenchmarkLeaseRenew applies one renewal of a batch of 16 leases per op.
func BenchmarkLeaseRenew(b *testing.B) {
	h := newHarness(b)
	req := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRenew{LeaseRenew: &dkvpb.LeaseRenewRequest{Ids: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7}}}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := h.apply(req); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}
