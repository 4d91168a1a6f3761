package mvcc

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

func BenchmarkApplyPut(b *testing.B) {
	h := newHarness(b)
	reqs := make([]*dkvpb.InternalRequest, 1024)
	for i := range reqs {
		reqs[i] = putReq(fmt.Sprintf("key/%04d", i), "some value of moderate length")
	}
	batch := h.db.NewIndexedBatch()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := h.s.Apply(batch, reqs[i%len(reqs)]); res.Err != nil {
			b.Fatal(res.Err)
		}
		if i%256 == 255 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			batch = h.db.NewIndexedBatch()
		}
	}
	batch.Close()
}

// BenchmarkRangeSingleKey reads one key through Range on the database
// (reading the revision counters from Pebble) and through RangeLatest
// (the revision from memory).
func BenchmarkRangeSingleKey(b *testing.B) {
	for _, bc := range []struct {
		name string
		rng  func(h *harness, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error)
	}{
		{"Range", func(h *harness, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) { return h.s.Range(h.db, req) }},
		{"RangeLatest", func(h *harness, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
			return h.s.RangeLatest(h.db, req)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHarness(b)
			for i := 0; i < 1024; i++ {
				h.mustApply(putReq(fmt.Sprintf("key/%04d", i), "some value of moderate length"))
			}
			req := &dkvpb.RangeRequest{Key: []byte("key/0512")}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, err := bc.rng(h, req)
				if err != nil || len(resp.Kvs) != 1 {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyTxn applies a txn of one compare and two puts.
func BenchmarkApplyTxn(b *testing.B) {
	h := newHarness(b)
	reqs := make([]*dkvpb.InternalRequest, 512)
	for i := range reqs {
		k := fmt.Sprintf("key/%04d", i)
		reqs[i] = txnReq(&dkvpb.TxnRequest{
			Compare: []*dkvpb.Compare{{Key: []byte(k), Target: dkvpb.Compare_VERSION, Result: dkvpb.Compare_GREATER, TargetUnion: &dkvpb.Compare_Version{Version: -1}}},
			Success: []*dkvpb.RequestOp{opPut(k, "some value of moderate length"), opPut(k+"/b", "another value")},
		})
	}
	batch := h.db.NewIndexedBatch()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := h.s.Apply(batch, reqs[i%len(reqs)]); res.Err != nil {
			b.Fatal(res.Err)
		}
		if i%256 == 255 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			batch = h.db.NewIndexedBatch()
		}
	}
	batch.Close()
}

// BenchmarkRange100 reads 100 keys of 1,024 through RangeLatest, and the
// same 100 at a past revision (from history).
func BenchmarkRange100(b *testing.B) {
	h := newHarness(b)
	for i := 0; i < 1024; i++ {
		h.mustApply(putReq(fmt.Sprintf("key/%04d", i), "some value of moderate length"))
	}
	past := h.s.Revision()
	for i := 0; i < 1024; i += 2 {
		h.mustApply(putReq(fmt.Sprintf("key/%04d", i), "a newer value"))
	}
	for _, bc := range []struct {
		name string
		rev  int64
	}{{"Latest", 0}, {"AtRevision", past}} {
		b.Run(bc.name, func(b *testing.B) {
			req := &dkvpb.RangeRequest{Key: []byte("key/0500"), RangeEnd: []byte("key/0600"), Revision: bc.rev}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, err := h.s.RangeLatest(h.db, req)
				if err != nil || len(resp.Kvs) != 100 {
					b.Fatal(err, len(resp.GetKvs()))
				}
			}
		})
	}
}

// BenchmarkApplyLeaseRenew applies keep-alive batches of 64 leases out of
// 1,000 (what the server's renewer proposes under load).
func BenchmarkApplyLeaseRenew(b *testing.B) {
	h := newHarness(b)
	for id := int64(100); id < 1100; id++ {
		h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: 60_000}}})
	}
	reqs := make([]*dkvpb.InternalRequest, 16)
	for i := range reqs {
		ids := make([]int64, 64)
		for j := range ids {
			ids[j] = 100 + int64((i*64+j)%1000)
		}
		reqs[i] = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRenew{LeaseRenew: &dkvpb.LeaseRenewRequest{Ids: ids}}}
	}
	batch := h.db.NewIndexedBatch()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res := h.s.Apply(batch, reqs[i%len(reqs)]); res.Err != nil {
			b.Fatal(res.Err)
		}
		if i%16 == 15 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			batch = h.db.NewIndexedBatch()
		}
	}
	batch.Close()
}
