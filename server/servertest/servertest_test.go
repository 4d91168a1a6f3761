package servertest_test

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestStartKeepsDataAcrossRestart: a node from Start serves its
// in-memory connection at once, no listener unless asked for, and a
// second Start on the same WithDataDir sees what the first wrote.
func TestStartKeepsDataAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	n := servertest.Start(t, servertest.WithDataDir(dir))
	if n.Srv.ClientAddr() != "" || n.Srv.HTTPAddr() != "" {
		t.Fatalf("listening without WithClientPort/WithHTTPPort: %q %q", n.Srv.ClientAddr(), n.Srv.HTTPAddr())
	}
	if _, err := n.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	n.Stop() // idempotent, as the cleanup calls it again

	n = servertest.Start(t, servertest.WithDataDir(dir), servertest.WithClientPort(),
		servertest.WithConfig(func(c *server.Config) { c.MaxValueBytes = 1 << 10 }))
	if n.Srv.ClientAddr() == "" {
		t.Fatal("WithClientPort: no client address")
	}
	got, err := n.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %v", got.Kvs)
	}
	if _, err := n.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("big"), Value: make([]byte, 2<<10)}); err == nil {
		t.Fatal("WithConfig's 1 KiB value limit not applied: a 2 KiB put succeeded")
	}
}

// TestClusterClientReachesLeader: a 3-node cluster elects a leader and a
// client of its members writes through it to every member.
func TestClusterClientReachesLeader(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	cl := servertest.Client(t, c.Nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.WaitConverged()
	for _, nd := range c.Nodes {
		got, err := nd.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k"), Serializable: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 {
			t.Fatalf("%s: %v", nd.Name, got.Kvs)
		}
	}
}
