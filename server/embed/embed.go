// Package embed runs a single-node DKV store inside this process and
// hands back an ordinary *client.Client for it, as etcd's embed package
// does. It lives with the server because it links the server (Pebble,
// raft); no package under client/ does, so programs that only talk to a
// remote cluster import client alone and stay small.
//
// The node has no network listeners unless WithServerConfig adds some;
// the client reaches it through an in-memory pipe. Closing the client
// stops the node. Data persists in the directory across opens.
package embed

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server"
)

// Option configures Open.
type Option func(*config)

type config struct {
	server server.Config
}

// WithServerConfig edits the embedded node's configuration (limits,
// auto-compaction, logger, ...). DataDir and the listen addresses are set
// by Open before fn runs; fn may add listeners, e.g. to expose the
// embedded store over gRPC as well.
func WithServerConfig(fn func(*server.Config)) Option {
	return func(c *config) { fn(&c.server) }
}

// WithLogger sends the embedded node's logs to l; by default they are
// discarded.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.server.Logger = l }
}

// servers maps each open embedded client to its node, for Server.
var servers sync.Map // *client.Client -> *server.Server

// Open starts a single-node store with its data in dir, inside this
// process and without network listeners, and returns a Client for it.
// Close stops the node. Data persists in dir across opens.
func Open(ctx context.Context, dir string, opts ...Option) (*client.Client, error) {
	cfg := config{server: server.Config{
		DataDir: dir,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := server.New(cfg.server)
	if err != nil {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("embedded config: %v", err)}
	}
	conn, err := srv.StartInProcess(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting embedded node in %s: %w", dir, err)
	}
	var c *client.Client
	c = client.NewFromConn(conn, func() error {
		servers.Delete(c)
		return srv.Stop()
	})
	servers.Store(c, srv)
	return c, nil
}

// Server is the node behind a client from Open, until that client is
// closed; nil for any other client.
func Server(c *client.Client) *server.Server {
	if s, ok := servers.Load(c); ok {
		return s.(*server.Server)
	}
	return nil
}
