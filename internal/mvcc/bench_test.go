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
