package servertest

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"golang.org/x/crypto/bcrypt"
)

// Option changes how Start configures its node.
type Option func(*server.Config)

// WithConfig lets edit change the node's configuration after Start's
// defaults are set: a fresh t.TempDir(), 10 ms ticks, no fsync, logs
// dropped, passwords hashed at bcrypt's minimum cost (so auth tests stay
// fast), no network listeners.
func WithConfig(edit func(*server.Config)) Option { return Option(edit) }

// WithDataDir keeps the node's data in dir, so a second Start on the same
// dir is a restart.
func WithDataDir(dir string) Option { return func(c *server.Config) { c.DataDir = dir } }

// WithClientPort binds the gRPC port to a free loopback port
// (Srv.ClientAddr), for tests that come in over the network as a remote
// client would.
func WithClientPort() Option { return func(c *server.Config) { c.ClientAddr = "127.0.0.1:0" } }

// WithHTTPPort binds the HTTP port to a free loopback port (Srv.HTTPAddr).
func WithHTTPPort() Option { return func(c *server.Config) { c.HTTPAddr = "127.0.0.1:0" } }

// startTimeout bounds Start: opening the store, electing itself and
// applying its log.
const startTimeout = 20 * time.Second

// Start starts a single-node store in this process, waits until it is
// ready, and returns it with an in-memory connection (Conn, KV, Cluster).
// The node stops when the test ends; Stop stops it earlier, e.g. to
// start it again on the same WithDataDir.
func Start(t testing.TB, opts ...Option) *Node {
	t.Helper()
	cfg := server.Config{DataDir: t.TempDir(), TickInterval: 10 * time.Millisecond, NoSync: true, Logger: testutil.Quiet,
		AuthBcryptCost: bcrypt.MinCost}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	conn, err := srv.StartInProcess(ctx)
	if err != nil {
		t.Fatalf("starting a node in %s: %v", cfg.DataDir, err)
	}
	n := &Node{Name: cfg.Name, Dir: cfg.DataDir, Cfg: cfg, Srv: srv, Conn: conn,
		KV: dkvpb.NewKVClient(conn), Cluster: dkvpb.NewClusterClient(conn)}
	t.Cleanup(n.Stop)
	return n
}

// Stop closes the node's connection and stops it (its data dir stays).
// It is idempotent.
func (n *Node) Stop() {
	if n.Srv == nil {
		return
	}
	n.Conn.Close()
	n.Srv.Stop()
	n.Srv = nil
}
