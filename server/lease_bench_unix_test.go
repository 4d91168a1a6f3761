//go:build unix

package server

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// BenchmarkKeepAliveOnceHandler is the server's keep-alive handler called
// in-process by many goroutines on a single synced member: the renewer's
// batching, the proposal, the raft log append and fsync and the apply of
// each renew batch, without gRPC. An op is one lease renewed; cpu-us/op is
// the whole process's CPU per renewal.
func BenchmarkKeepAliveOnceHandler(b *testing.B) {
	s, err := New(Config{DataDir: b.TempDir(), ClientAddr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Start(sctx); err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	<-s.Ready()
	ls := s.grpcAPI().Lease()
	ids := make([]int64, 1000)
	for i := range ids {
		resp, err := ls.Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: 60_000})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = resp.GetId()
	}
	b.SetParallelism(16) // 16 x GOMAXPROCS renewers in flight, as many clients do
	b.ReportAllocs()
	m0, cpu0 := s.store.DB().Metrics(), processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := ls.KeepAliveOnce(ctx, &dkvpb.LeaseKeepAliveOnceRequest{Id: ids[i%len(ids)]}); err != nil {
				b.Error(err)
				return
			}
			i += 7
		}
	})
	b.StopTimer()
	reportPebbleWork(b, m0, s.store.DB().Metrics(), processCPU()-cpu0)
}
