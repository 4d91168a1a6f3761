package client

import (
	"context"
	"encoding/json"
	"fmt"
)

// PutJSON stores v, encoded as JSON, under key.
func PutJSON(ctx context.Context, kv KV, key string, v any, opts ...OpOption) (*PutResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding %q as JSON: %v", ErrInvalidInput, key, err)
	}
	return kv.Put(ctx, key, b, opts...)
}

// GetJSON reads key and decodes its JSON value into a T. It returns the
// key's metadata too, e.g. for a later IfModRevision put.
func GetJSON[T any](ctx context.Context, kv KV, key string, opts ...OpOption) (T, *KeyValue, error) {
	var v T
	got, err := kv.Get(ctx, key, opts...)
	if err != nil {
		return v, nil, err
	}
	if err := json.Unmarshal(got.Value, &v); err != nil {
		return v, got, fmt.Errorf("decoding JSON value of %q as %T: %w", key, v, err)
	}
	return v, got, nil
}
