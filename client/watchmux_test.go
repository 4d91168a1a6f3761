package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"google.golang.org/grpc"
)

// Every watch of a client rides one gRPC stream; stopping one leaves the
// others running on it.
func TestWatchesShareOneStream(t *testing.T) {
	srv := startServer(t, t.TempDir())
	var streams atomic.Int64
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if method == "/dkv.v1.Watch/Watch" {
			streams.Add(1)
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{
		Endpoints:        []string{srv.ClientAddr()},
		AutoSyncInterval: -1,
		DialOptions:      []grpc.DialOption{grpc.WithStreamInterceptor(count)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n = 5
	ws := make([]*client.Watch, n)
	for i := range ws {
		if ws[i], err = c.WatchKey(ctx, fmt.Sprintf("s/%d", i)); err != nil {
			t.Fatal(err)
		}
		defer ws[i].Stop()
	}
	for i := range ws {
		if _, err := c.Put(ctx, fmt.Sprintf("s/%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range ws {
		if got, want := describe(next(t, w)), fmt.Sprintf("[PUT s/%d=v]", i); got[len(got)-len(want):] != want {
			t.Fatalf("watch %d got %s, want %s", i, got, want)
		}
	}
	if got := streams.Load(); got != 1 {
		t.Fatalf("%d watches opened %d Watch streams, want 1", n, got)
	}

	ws[0].Stop()
	if err := ws[0].Err(); err != nil {
		t.Fatalf("stopped watch: %v", err)
	}
	for i := range ws {
		if _, err := c.Put(ctx, fmt.Sprintf("s/%d", i), []byte("w")); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range ws[1:] {
		if got, want := describe(next(t, w)), fmt.Sprintf("[PUT s/%d=w]", i+1); got[len(got)-len(want):] != want {
			t.Fatalf("after another watch stopped, watch %d got %s, want %s", i+1, got, want)
		}
	}
	if got := streams.Load(); got != 1 {
		t.Fatalf("Watch streams after a Stop: %d, want 1", got)
	}
}

// A watch whose application does not read cannot hold up the other
// watches on the shared stream, and once read it has every revision, in
// order, once (it was paused on the server and resumed).
func TestSlowWatchDoesNotStallOthers(t *testing.T) {
	defer client.SetMaxWatchQueue(4)()
	c := sharedEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	slow, err := c.WatchPrefix(ctx, "q/")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Stop()
	fast, err := c.WatchPrefix(ctx, "q/")
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Stop()

	const puts = 60
	var revs []int64
	for i := range puts {
		r, err := c.Put(ctx, fmt.Sprintf("q/%d", i), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Revision)
		if b := next(t, fast); b.Revision != r.Revision {
			t.Fatalf("fast watch got %s, want revision %d", describe(b), r.Revision)
		}
	}
	for i, want := range revs {
		b := next(t, slow)
		if b.Revision != want || len(b.Events) != 1 || b.Events[0].KV.Key != fmt.Sprintf("q/%d", i) {
			t.Fatalf("slow watch batch %d: %s, want q/%d at %d", i, describe(b), i, want)
		}
	}
}
