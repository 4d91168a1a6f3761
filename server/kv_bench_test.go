package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// BenchmarkRangeHandler is the server's read handler for serializable
// reads (no ReadIndex wait), called in-process: the CPU a read costs in
// the server beyond gRPC.
func BenchmarkRangeHandler(b *testing.B) {
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
	for i := 0; i < 200; i++ {
		if _, err := kv.Put(ctx, &dkvpb.PutRequest{Key: fmt.Appendf(nil, "key/%04d", i), Value: []byte("some value of moderate length")}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		req  *dkvpb.RangeRequest
		n    int
	}{
		{"Get", &dkvpb.RangeRequest{Key: []byte("key/0100"), Serializable: true}, 1},
		{"Range100", &dkvpb.RangeRequest{Key: []byte("key/0050"), RangeEnd: []byte("key/0150"), Serializable: true}, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				resp, err := kv.Range(ctx, bc.req)
				if err != nil || len(resp.Kvs) != bc.n {
					b.Fatal(err)
				}
			}
		})
	}
}
