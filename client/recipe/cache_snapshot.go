package recipe

import (
	"sort"

	"github.com/dkv-io/dkv/client"
)

// Snapshot returns the cache's revision and every cached key, in key
// order, read together: the keys are exactly the prefix at that
// revision. (Revision and List, called one after the other, may straddle
// a change.)
func (c *Cache) Snapshot() (int64, []*client.KeyValue) {
	c.mu.RLock()
	rev := c.rev
	out := make([]*client.KeyValue, 0, len(c.items))
	for _, kv := range c.items {
		out = append(out, kv)
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return rev, out
}

// WithCacheReady has NewCache call f once the snapshot is loaded and the
// handlers have seen it, before any later change reaches them: the
// handler calls made until then are the snapshot's (Revision() in f is
// the snapshot's revision).
func WithCacheReady(f func(*Cache)) CacheOption {
	return func(c *cacheConfig) { c.ready = f }
}
