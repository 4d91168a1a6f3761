package ratelimit

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
)

// Each calls fn with every bucket whose key starts with prefix, in key
// order, until fn returns false. The key is only valid during the call.
// A bucket stores only its GCRA state: its limit, period and burst are
// each request's, so they are not known here.
func Each(r pebble.Reader, prefix []byte, fn func(key []byte, s State) bool) error {
	lo := StateKey(prefix)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: keyrange.PrefixEnd(lo)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		s, err := decode(v)
		if err != nil {
			return err
		}
		if !fn(it.Key()[len(keys.RateLimitPrefix):], s) {
			return nil
		}
	}
	return it.Error()
}
