package client

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// KV is the key-value API shared by remote and embedded clients. Recipes
// and typed helpers (PutJSON, GetJSON) take a KV, so they work with either
// and with test doubles.
type KV interface {
	// Put writes value under key. With IfAbsent, IfVersion or
	// IfModRevision it is conditional and fails with ErrConflict when the
	// condition does not hold.
	Put(ctx context.Context, key string, value []byte, opts ...OpOption) (*PutResult, error)
	// Get reads one key; ErrNotFound when it does not exist (at WithRev's
	// revision, if given).
	Get(ctx context.Context, key string, opts ...OpOption) (*KeyValue, error)
	// Range reads key alone, [key, end) with WithRange, or every key with
	// the prefix key with WithPrefix.
	Range(ctx context.Context, key string, opts ...OpOption) (*RangeResult, error)
	// List reads every key starting with prefix; it is Range with
	// WithPrefix.
	List(ctx context.Context, prefix string, opts ...OpOption) (*RangeResult, error)
	// Delete deletes key, a range or a prefix.
	Delete(ctx context.Context, key string, opts ...OpOption) (*DeleteResult, error)
	// Txn starts a transaction: If(compares).Then(ops).Else(ops).Commit().
	Txn(ctx context.Context) *Txn
	// Counter atomically adds delta to the integer stored at key (absent
	// counts as 0) and returns the new value.
	Counter(ctx context.Context, key string, delta int64, opts ...OpOption) (int64, error)
	// Compact discards the history before revision rev.
	Compact(ctx context.Context, rev int64) error
}

// KeyValue is one version of a key.
type KeyValue struct {
	Key   string
	Value []byte
	// CreateRevision is the revision of the put that created the key.
	CreateRevision int64
	// ModRevision is the revision of the last write to the key.
	ModRevision int64
	// Version counts writes since creation: 1 after the first put.
	Version int64
	// Lease is the id of the lease the key is attached to, 0 for none.
	Lease int64
	// Labels are the version's labels (WithLabels), nil for none.
	Labels map[string]string
}

// PutResult is the outcome of a Put.
type PutResult struct {
	// Revision is the store revision the put created.
	Revision int64
	// PrevKV is the previous version, with WithPrevKV, if the key existed.
	PrevKV *KeyValue
	// Lease is the id of the lease a Put WithTTL granted, 0 otherwise.
	Lease int64
}

// RangeResult is the outcome of a Range or List.
type RangeResult struct {
	// Revision is the store revision the read observed.
	Revision int64
	KVs      []*KeyValue
	// More is true when WithLimit cut the result short.
	More bool
	// Count is the number of keys in the range, regardless of the limit.
	Count int64
}

// DeleteResult is the outcome of a Delete.
type DeleteResult struct {
	// Revision is the store revision after the delete.
	Revision int64
	// Deleted is the number of keys deleted.
	Deleted int64
	// PrevKVs are the deleted keys, with WithPrevKV.
	PrevKVs []*KeyValue
}

func fromPB(kv *dkvpb.KeyValue) *KeyValue {
	if kv == nil {
		return nil
	}
	return &KeyValue{
		Key:            string(kv.Key),
		Value:          kv.Value,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
		Version:        kv.Version,
		Lease:          kv.Lease,
		Labels:         kv.Labels,
	}
}

func fromPBs(kvs []*dkvpb.KeyValue) []*KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = fromPB(kv)
	}
	return out
}

func putResult(r *dkvpb.PutResponse) *PutResult {
	return &PutResult{Revision: r.GetHeader().GetRevision(), PrevKV: fromPB(r.GetPrevKv()), Lease: r.GetLease()}
}

func rangeResult(r *dkvpb.RangeResponse) *RangeResult {
	return &RangeResult{Revision: r.GetHeader().GetRevision(), KVs: fromPBs(r.GetKvs()), More: r.GetMore(), Count: r.GetCount()}
}

func deleteResult(r *dkvpb.DeleteRangeResponse) *DeleteResult {
	return &DeleteResult{Revision: r.GetHeader().GetRevision(), Deleted: r.GetDeleted(), PrevKVs: fromPBs(r.GetPrevKvs())}
}

// Put implements KV.
func (c *Client) Put(ctx context.Context, key string, value []byte, opts ...OpOption) (*PutResult, error) {
	cfg := buildConfig(opts)
	req, err := cfg.putRequest(key, value)
	if err != nil {
		return nil, err
	}
	var resp *dkvpb.PutResponse
	err = c.callOnce(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.kv.Put(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return putResult(resp), nil
}

// Get implements KV.
func (c *Client) Get(ctx context.Context, key string, opts ...OpOption) (*KeyValue, error) {
	cfg := buildConfig(opts)
	if cfg.prefix || cfg.hasRange || cfg.countOnly {
		return nil, newError(ErrInvalidInput, "Get reads one key; use Range for WithPrefix, WithRange or WithCountOnly")
	}
	r, err := c.rangeOnce(ctx, key, cfg)
	if err != nil {
		return nil, err
	}
	if len(r.KVs) == 0 {
		if cfg.rev > 0 {
			return nil, newError(ErrNotFound, "key %q not found at revision %d", key, cfg.rev)
		}
		return nil, newError(ErrNotFound, "key %q not found", key)
	}
	return r.KVs[0], nil
}

// Range implements KV.
func (c *Client) Range(ctx context.Context, key string, opts ...OpOption) (*RangeResult, error) {
	return c.rangeOnce(ctx, key, buildConfig(opts))
}

// List implements KV.
func (c *Client) List(ctx context.Context, prefix string, opts ...OpOption) (*RangeResult, error) {
	cfg := buildConfig(opts)
	if cfg.hasRange {
		return nil, newError(ErrInvalidInput, "List takes a prefix; use Range for WithRange")
	}
	cfg.prefix = true
	return c.rangeOnce(ctx, prefix, cfg)
}

func (c *Client) rangeOnce(ctx context.Context, key string, cfg opConfig) (*RangeResult, error) {
	req, err := cfg.rangeRequest(key)
	if err != nil {
		return nil, err
	}
	var resp *dkvpb.RangeResponse
	err = c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.kv.Range(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rangeResult(resp), nil
}

// Delete implements KV.
func (c *Client) Delete(ctx context.Context, key string, opts ...OpOption) (*DeleteResult, error) {
	cfg := buildConfig(opts)
	req, err := cfg.deleteRequest(key)
	if err != nil {
		return nil, err
	}
	var resp *dkvpb.DeleteRangeResponse
	err = c.callOnce(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.kv.DeleteRange(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return deleteResult(resp), nil
}

// Counter implements KV. With WithMin / WithMax an add that would cross a
// bound fails with ErrConflict and changes nothing.
func (c *Client) Counter(ctx context.Context, key string, delta int64, opts ...OpOption) (int64, error) {
	cfg := buildConfig(opts)
	req, err := cfg.counterRequest(key, delta)
	if err != nil {
		return 0, err
	}
	var resp *dkvpb.CounterResponse
	err = c.callOnce(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.kv.Counter(ctx, req, o...)
		return err
	})
	if err != nil {
		return 0, err
	}
	return resp.GetValue(), nil
}

// Compact implements KV. Reads at revisions below rev then fail with
// ErrCompacted.
func (c *Client) Compact(ctx context.Context, rev int64) error {
	return c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.kv.Compact(ctx, &dkvpb.CompactRequest{Revision: rev}, o...)
		return err
	})
}
