package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// storeMetadata is the gRPC metadata key naming a call's store.
const storeMetadata = "dkv-store"

// storeConn sends every call in one named store: the server maps its keys
// into the store, so the client cannot reach another store's keys.
type storeConn struct {
	*grpc.ClientConn
	store string
}

func (s storeConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return s.ClientConn.Invoke(metadata.AppendToOutgoingContext(ctx, storeMetadata, s.store), method, args, reply, opts...)
}

func (s storeConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return s.ClientConn.NewStream(metadata.AppendToOutgoingContext(ctx, storeMetadata, s.store), desc, method, opts...)
}

// WithStore is a Client over the same connection whose every call is in
// the named store ("" the default store). It shares c's connection:
// close c, not it (its Close does nothing). The store must exist (dkv
// store create NAME); a call naming a missing store fails with
// ErrNotFound.
func (c *Client) WithStore(name string) *Client {
	cfg := c.cfg
	cfg.Store = name
	d := newClient(cfg, c.conn)
	d.borrowed = true
	return d
}

// Store is the store the client's calls are in ("" the default store).
func (c *Client) Store() string { return c.cfg.Store }
