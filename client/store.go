package client

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"

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

// StoreInfo is a named store's usage and quota.
type StoreInfo struct {
	Name string
	// Keys and Bytes are the store's live keys and their key and value
	// bytes; MaxKeys and MaxBytes its quota (0: unlimited).
	Keys, Bytes       int64
	MaxKeys, MaxBytes int64
	// CreateRevision is the store revision when the store was created.
	CreateRevision int64
}

func storeInfo(s *dkvpb.StoreInfo) StoreInfo {
	return StoreInfo{Name: s.GetName(), Keys: s.GetKeys(), Bytes: s.GetBytes(),
		MaxKeys: s.GetMaxKeys(), MaxBytes: s.GetMaxBytes(), CreateRevision: s.GetCreateRevision()}
}

// storeAdmin is the Store service over the plain connection: managing
// stores is the same from every store.
func (c *Client) storeAdmin() dkvpb.StoreClient { return dkvpb.NewStoreClient(c.conn) }

// CreateStore creates a named store with a quota of at most maxKeys live
// keys and maxBytes key and value bytes (0: unlimited). ErrConflict if it
// exists; ErrInvalidInput for a bad name ([a-z0-9][a-z0-9._-]{0,62}).
func (c *Client) CreateStore(ctx context.Context, name string, maxKeys, maxBytes int64) (StoreInfo, error) {
	var resp *dkvpb.StoreCreateResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.storeAdmin().Create(ctx, &dkvpb.StoreCreateRequest{Name: name, MaxKeys: maxKeys, MaxBytes: maxBytes}, o...)
		return err
	})
	return storeInfo(resp.GetStore()), err
}

// SetStoreQuota changes a store's quota (0: unlimited). Lowering it below
// the current usage refuses further growth, deletes nothing.
func (c *Client) SetStoreQuota(ctx context.Context, name string, maxKeys, maxBytes int64) (StoreInfo, error) {
	var resp *dkvpb.StoreCreateResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.storeAdmin().SetQuota(ctx, &dkvpb.StoreCreateRequest{Name: name, MaxKeys: maxKeys, MaxBytes: maxBytes}, o...)
		return err
	})
	return storeInfo(resp.GetStore()), err
}

// DeleteStore deletes a store. A store with keys is refused (ErrConflict)
// unless force, which deletes its keys with it, at one revision; it
// returns how many keys were deleted.
func (c *Client) DeleteStore(ctx context.Context, name string, force bool) (int64, error) {
	var resp *dkvpb.StoreDeleteResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.storeAdmin().Delete(ctx, &dkvpb.StoreDeleteRequest{Name: name, Force: force}, o...)
		return err
	})
	return resp.GetDeleted(), err
}

// ListStores lists every named store, in name order.
func (c *Client) ListStores(ctx context.Context) ([]StoreInfo, error) {
	var resp *dkvpb.StoreListResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.storeAdmin().List(ctx, &dkvpb.StoreListRequest{}, o...)
		return err
	})
	out := make([]StoreInfo, 0, len(resp.GetStores()))
	for _, s := range resp.GetStores() {
		out = append(out, storeInfo(s))
	}
	return out, err
}

// StoreStats is one store's usage and quota; ErrNotFound if it does not
// exist.
func (c *Client) StoreStats(ctx context.Context, name string) (StoreInfo, error) {
	var resp *dkvpb.StoreStatsResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.storeAdmin().Stats(ctx, &dkvpb.StoreStatsRequest{Name: name}, o...)
		return err
	})
	return storeInfo(resp.GetStore()), err
}
