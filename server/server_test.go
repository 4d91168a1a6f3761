package server

import (
	"context"
	"errors"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
)

func startTestServer(t *testing.T, dir string) (*Server, dkvpb.KVClient) {
	t.Helper()
	s, err := New(Config{DataDir: dir, ClientAddr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s, dkvpb.NewKVClient(startInProcess(t, s))
}

// startInProcess starts s (from New) with StartInProcess, failing the
// test if it is not ready within 20 s; the node and its connection stop
// when the test ends. Tests outside this package use server/servertest,
// which this package's own tests cannot import.
func startInProcess(t testing.TB, s *Server) *grpc.ClientConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := s.StartInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); s.Stop() })
	return conn
}

func TestPutGetSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, kv := startTestServer(t, dir)
	ctx := context.Background()
	lastRev := int64(1) // an empty store is at revision 1, as etcd's
	for i := 0; i < 100; i++ {
		resp, err := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision != lastRev+1 {
			t.Fatalf("put %d: revision %d, want %d", i, resp.Header.Revision, lastRev+1)
		}
		lastRev = resp.Header.Revision
	}
	s.Stop()

	_, kv = startTestServer(t, dir)
	got, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || got.Kvs[0].Value[0] != 99 || got.Kvs[0].Version != 100 || got.Header.Revision != 101 {
		t.Fatalf("after restart got %v", got)
	}
	old, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k"), Revision: 11})
	if err != nil {
		t.Fatal(err)
	}
	if old.Kvs[0].Value[0] != 9 {
		t.Fatalf("history at rev 11: %v", old.Kvs)
	}
}

func TestErrorsCarryDKVCodes(t *testing.T) {
	_, kv := startTestServer(t, t.TempDir())
	ctx := context.Background()
	_, err := kv.Put(ctx, &dkvpb.PutRequest{Key: nil, Value: []byte("x")})
	if dkverr.CodeOf(err) != dkverr.InvalidInput {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	_, err = kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("a"), Value: []byte("2"), IfAbsent: true})
	if !errors.Is(dkverr.FromGRPC(err), dkverr.Sentinel(dkverr.Conflict)) {
		t.Fatalf("if-absent on existing key: %v", err)
	}
}
