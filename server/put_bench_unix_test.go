//go:build unix

package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc/metadata"
)

// BenchmarkPutHandler is the server's put handler called in-process on a
// single synced member: the whole write path beyond gRPC (propose, raft
// log append and fsync, apply, watch hub), for a small and a 64 KiB
// value, and for the small value with each goroutine's puts in a client
// session of its own (what exactly-once writes cost). Its CPU profile
// (-cpuprofile) includes Pebble's background flushes and compactions of
// what the puts wrote.
func BenchmarkPutHandler(b *testing.B) {
	for _, c := range []struct {
		size     int
		sessions bool
	}{{256, false}, {256, true}, {64 << 10, false}} {
		name := fmt.Sprintf("value=%d", c.size)
		if c.sessions {
			name += "/sessions"
		}
		size := c.size
		b.Run(name, func(b *testing.B) {
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
			kv := s.grpcAPI().KV()
			// Random letters and digits, as bench/compare writes: Snappy
			// finds next to nothing to compress in them.
			const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
			r := rand.New(rand.NewPCG(1, 2))
			vals := make([][]byte, 16)
			for i := range vals {
				vals[i] = make([]byte, size)
				for j := range vals[i] {
					vals[i][j] = alphabet[r.IntN(len(alphabet))]
				}
			}
			keys := make([][]byte, 1000)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "key/%04d", i)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			m0, cpu0 := s.store.DB().Metrics(), processCPU()
			b.ResetTimer()
			var sessionIDs atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				var id uint64
				if c.sessions {
					id = sessionIDs.Add(1)
					if _, err := kv.SessionOpen(ctx, &dkvpb.SessionOpenRequest{Id: id, TtlMs: 60_000}); err != nil {
						b.Error(err)
						return
					}
				}
				for pb.Next() {
					pctx := ctx
					if c.sessions {
						seq := uint64(i + 1)
						pctx = metadata.NewIncomingContext(ctx, metadata.Pairs(dkvpb.SessionMetadata, dkvpb.FormatSession(id, seq, seq)))
					}
					if _, err := kv.Put(pctx, &dkvpb.PutRequest{Key: keys[i%len(keys)], Value: vals[i%len(vals)]}); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.StopTimer()
			reportPebbleWork(b, m0, s.store.DB().Metrics(), processCPU()-cpu0)
		})
	}
}

// processCPU is the CPU time (user+system) this process has used: counted
// work, which other load on the machine hardly changes, unlike ns/op.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportPebbleWork reports, per op, the CPU the process used and what
// Pebble wrote and read between m0 and m1: WAL bytes, bytes flushed and
// compacted (sstables and blob files) and block cache misses.
func reportPebbleWork(b *testing.B, m0, m1 *pebble.Metrics, cpu time.Duration) {
	n := float64(b.N)
	written := func(m *pebble.Metrics) (flushed, compacted, blobCompacted uint64) {
		for _, l := range m.Levels {
			flushed += l.TableBytesFlushed + l.BlobBytesFlushed
			compacted += l.TableBytesCompacted + l.BlobBytesCompacted
			blobCompacted += l.BlobBytesCompacted
		}
		return flushed, compacted, blobCompacted
	}
	f0, c0, bc0 := written(m0)
	f1, c1, bc1 := written(m1)
	if testing.Verbose() {
		b.Logf("pebble after:\n%s", m1)
	}
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-us/op")
	b.ReportMetric(float64(m1.WAL.BytesWritten-m0.WAL.BytesWritten)/n, "wal-B/op")
	b.ReportMetric(float64(f1-f0)/n, "flush-B/op")
	b.ReportMetric(float64(c1-c0)/n, "compact-B/op")
	b.ReportMetric(float64(bc1-bc0)/n, "compact-blob-B/op")
	b.ReportMetric(float64(m1.BlockCache.Misses-m0.BlockCache.Misses)/n, "cache-miss/op")
}
