package client_test

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/embed"
	"github.com/dkv-io/dkv/server/servertest"
)

// startServer runs a single-node server with a gRPC listener on a free
// port, stopped when t ends.
func startServer(t *testing.T, dir string) *server.Server {
	t.Helper()
	return servertest.Start(t, servertest.WithDataDir(dir), servertest.WithClientPort()).Srv
}

func dial(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openEmbedded(t *testing.T, dir string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// shared is one embedded node for the tests that need only some store:
// each keeps to keys of its own and assumes nothing of the revisions but
// those it wrote. Opening a node per test cost most of their time.
var shared struct {
	once sync.Once
	dir  string
	c    *client.Client
	err  error
}

func sharedEmbedded(t *testing.T) *client.Client {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "dkv-client-test-"); shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shared.c, shared.err = embed.Open(ctx, shared.dir)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		shared.c.Close()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRemoteKV(t *testing.T) {
	runKVSuite(t, func(t *testing.T) *client.Client {
		return dial(t, startServer(t, t.TempDir()).ClientAddr())
	})
}

func TestEmbeddedKV(t *testing.T) {
	runKVSuite(t, func(t *testing.T) *client.Client { return openEmbedded(t, t.TempDir()) })
}

// A dead endpoint in the list is routed around.
func TestRemoteDeadEndpointRoutedAround(t *testing.T) {
	live := startServer(t, t.TempDir()).ClientAddr()
	c := dial(t, deadAddr(t), live, deadAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := c.Put(ctx, "k", []byte{byte(i)}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if kv, err := c.Get(ctx, "k"); err != nil || kv.Value[0] != byte(i) {
			t.Fatalf("get %d: %+v, %v", i, kv, err)
		}
	}
}

func TestEmbeddedDataSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "persist", []byte("yes")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	c = openEmbedded(t, dir)
	kv, err := c.Get(ctx, "persist")
	if err != nil || string(kv.Value) != "yes" {
		t.Fatalf("after reopen: %+v, %v", kv, err)
	}
}
