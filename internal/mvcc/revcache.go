package mvcc

import (
	"hash/maphash"
	"sync"
)

// revCache remembers, for keys written since the store was opened (or
// last reloaded), the revision of their newest version, so that a read
// at the current revision is one point lookup of that history record
// (with the tables' bloom filters) instead of a seek into the key's
// group through every level. It is filled only by the apply goroutine,
// before the batch that writes the version is committed, so it is never
// older than what a reader's view holds: a reader that finds the
// recorded version missing from its view (not committed yet, or purged)
// falls back to the seek. Bounded in bytes; a shard that fills up is
// emptied. Not an index of every key: a key never written since the
// start is read by the seek.
type revCache struct {
	seed   maphash.Seed
	shards [revCacheShards]revShard
}

const (
	revCacheShards = 16
	// revCacheShardBytes bounds a shard: keys plus about 48 bytes of
	// map overhead each. 16 shards hold at most 32 MiB.
	revCacheShardBytes = 2 << 20
	revCacheEntryBytes = 48
)

type revShard struct {
	mu    sync.RWMutex
	m     map[string]int64
	bytes int
}

func newRevCache() *revCache { return &revCache{seed: maphash.MakeSeed()} }

func (c *revCache) shard(key []byte) *revShard {
	return &c.shards[maphash.Bytes(c.seed, key)%revCacheShards]
}

// get returns the revision of key's newest version, if known.
func (c *revCache) get(key []byte) (int64, bool) {
	sh := c.shard(key)
	sh.mu.RLock()
	rev, ok := sh.m[string(key)]
	sh.mu.RUnlock()
	return rev, ok
}

// set records that key's newest version is at rev (a put or a
// tombstone).
func (c *revCache) set(key []byte, rev int64) {
	sh := c.shard(key)
	sh.mu.Lock()
	if _, ok := sh.m[string(key)]; !ok {
		sh.bytes += len(key) + revCacheEntryBytes
		if sh.m == nil || sh.bytes > revCacheShardBytes {
			sh.m = make(map[string]int64)
			sh.bytes = len(key) + revCacheEntryBytes
		}
	}
	sh.m[string(key)] = rev
	sh.mu.Unlock()
}

// reset forgets everything: the state was replaced (a snapshot install).
func (c *revCache) reset() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.m, sh.bytes = nil, 0
		sh.mu.Unlock()
	}
}
