package mvcc

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// loadLabelled applies n puts under o/ straight into the store in large
// batches; key i has state=rare when i%(n/matches)==0, else
// state=common, and customer/tier labels.
func loadLabelled(b *testing.B, h *harness, n, matches int) {
	b.Helper()
	every := n / matches
	batch := h.db.NewIndexedBatch()
	for i := 0; i < n; i++ {
		state := "common"
		if i%every == 0 {
			state = "rare"
		}
		p := &dkvpb.PutRequest{Key: []byte(fmt.Sprintf("o/%08d", i)), Value: []byte("some value of moderate length"),
			Labels: map[string]string{"state": state, "customer": fmt.Sprint(i % 1000), "tier": fmt.Sprint(i % 3)}}
		if res := h.s.Apply(batch, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: p}}); res.Err != nil {
			b.Fatal(res.Err)
		}
		if i%10000 == 9999 || i == n-1 {
			h.s.BeginCommit()
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			h.s.EndCommit()
			batch.Close()
			batch = h.db.NewIndexedBatch()
		}
	}
	batch.Close()
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], ds[(len(ds)*99)/100]
}

// BenchmarkQuery1M: a query for 100 matching keys out of 1,000,000,
// answered from the index and by scanning, in one run (one store).
// Reports p50/p99 latency in ms.
//
//	go test ./internal/mvcc/ -run '^$' -bench BenchmarkQuery1M -benchtime 1x
func BenchmarkQuery1M(b *testing.B) {
	const n, matches = 1_000_000, 100
	h := newHarness(b)
	t0 := time.Now()
	loadLabelled(b, h, n, matches)
	b.Logf("loaded %d keys in %v", n, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	res := h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_IndexCreate{IndexCreate: &dkvpb.IndexCreateRequest{Prefix: []byte("o/"), Label: "state"}}})
	b.Logf("index create over %d keys (one apply): %v, built %d", n, time.Since(t0).Round(time.Millisecond), res.Resp.(*dkvpb.IndexCreateResponse).Built)
	q, err := ParseQuery("prefix=o/ state=rare")
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		scan  bool
		iters int
	}{{"index", false, 200}, {"scan", true, 10}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				ds := make([]time.Duration, 0, bc.iters)
				for range bc.iters {
					snap := h.db.NewSnapshot()
					t := time.Now()
					r, err := h.s.Query(context.Background(), snap, q, QueryOptions{forceScan: bc.scan})
					want := "index o/ state"
					if bc.scan {
						want = "scan o/"
					}
					if err != nil || len(r.KVs) != matches || r.Plan != want {
						b.Fatalf("%s: %d keys, plan %q, %v", bc.name, len(r.KVs), r.Plan, err)
					}
					ds = append(ds, time.Since(t))
					snap.Close()
				}
				p50, p99 := percentiles(ds)
				b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
			}
		})
	}
}

// BenchmarkPutIndexes: apply throughput of labelled puts under o/ with
// 0, 1 and 3 indexes on the prefix, in one run. ns/op is per put;
// puts/s is reported.
//
//	go test ./internal/mvcc/ -run '^$' -bench BenchmarkPutIndexes -benchtime 200000x
func BenchmarkPutIndexes(b *testing.B) {
	for _, labels := range [][]string{nil, {"state"}, {"state", "customer", "tier"}} {
		b.Run(fmt.Sprintf("indexes=%d", len(labels)), func(b *testing.B) {
			h := newHarness(b)
			for _, l := range labels {
				h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_IndexCreate{IndexCreate: &dkvpb.IndexCreateRequest{Prefix: []byte("o/"), Label: l}}})
			}
			states := []string{"open", "paid", "shipped"}
			batch := h.db.NewIndexedBatch()
			b.ResetTimer()
			t0 := time.Now()
			for i := 0; i < b.N; i++ {
				p := &dkvpb.PutRequest{Key: []byte(fmt.Sprintf("o/%08d", i%50000)), Value: []byte("some value of moderate length"),
					Labels: map[string]string{"state": states[i%3], "customer": fmt.Sprint(i % 1000), "tier": fmt.Sprint(i % 7)}}
				if res := h.s.Apply(batch, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: p}}); res.Err != nil {
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
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "puts/s")
		})
	}
}
