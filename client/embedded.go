package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/dkv-io/dkv/server"
)

// EmbeddedOption configures OpenEmbedded.
type EmbeddedOption func(*embeddedConfig)

type embeddedConfig struct {
	server server.Config
	client Config
}

// WithServerConfig edits the embedded node's configuration (limits,
// auto-compaction, logger, ...). DataDir and the listen addresses are set
// by OpenEmbedded before fn runs; fn may add listeners, e.g. to expose the
// embedded store over gRPC as well.
func WithServerConfig(fn func(*server.Config)) EmbeddedOption {
	return func(c *embeddedConfig) { fn(&c.server) }
}

// WithLogger sends the embedded node's logs to l; by default they are
// discarded.
func WithLogger(l *slog.Logger) EmbeddedOption {
	return func(c *embeddedConfig) { c.server.Logger = l }
}

// OpenEmbedded starts a single-node store with its data in dir, inside
// this process and without network listeners, and returns a Client for
// it. Close stops the node. Data persists in dir across opens.
func OpenEmbedded(ctx context.Context, dir string, opts ...EmbeddedOption) (*Client, error) {
	ec := embeddedConfig{server: server.Config{
		DataDir: dir,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}}
	for _, o := range opts {
		o(&ec)
	}
	srv, err := server.New(ec.server)
	if err != nil {
		return nil, newError(ErrInvalidInput, "embedded config: %v", err)
	}
	if err := srv.Start(ctx); err != nil {
		srv.Stop()
		return nil, fmt.Errorf("starting embedded node in %s: %w", dir, err)
	}
	select {
	case <-srv.Ready():
	case <-ctx.Done():
		srv.Stop()
		return nil, fmt.Errorf("embedded node in %s not ready: %w", dir, ctx.Err())
	}
	conn, err := srv.DialInProcess(ctx)
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("connecting to embedded node: %w", err)
	}
	ec.client.EnsureDefaults()
	c := newClient(ec.client, conn)
	c.srv = srv
	return c, nil
}

// Server is the embedded node, nil for a remote client.
func (c *Client) Server() *server.Server { return c.srv }
