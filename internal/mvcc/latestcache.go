package mvcc

import "sync/atomic"

// latestCache is a bounded, write-through copy of latest records (s/mk)
// as the batch being applied holds them, for the apply goroutine's point
// reads (Writer.get): a put reads its key's create revision, version,
// lease, labels and previous value, and the key was usually written a
// moment ago. Every write of a latest record goes through writePut and
// writeDelete, which update the cache (a delete caches "absent"); a miss
// reads Pebble through the batch and fills the cache. So a hit returns
// exactly what getLatest on the batch would, and no result depends on the
// cache: only the number of Pebble reads does.
//
// Only the apply goroutine touches the entries; client reads (Range)
// never use it. It is cleared wholesale by Reload (a snapshot installed
// underneath) and when a Writer begins on an empty batch while entries
// written since the last EndCommit are in it (their batch was dropped
// without a commit; apply never does that, it stops the node instead).
//
// Bounds: at most maxEntries entries and maxBytes bytes of keys, values
// and labels; a record whose value and labels exceed maxRecordBytes is
// not cached (its entry, if any, is dropped). Eviction is a clock: each
// hit sets the entry's reference bit, and the hand evicts the first entry
// without one, clearing the bits it passes.
type latestCache struct {
	maxEntries, maxBytes, maxRecordBytes int

	idx   map[string]int32 // key → slot
	slots []cacheSlot
	free  []int32 // unused slots
	hand  int
	bytes int
	// dirty: entries changed since the last EndCommit (see Begin).
	dirty bool

	hits, misses atomic.Uint64
}

type cacheSlot struct {
	key  string
	rec  record
	live bool // the key exists; false caches "absent"
	ref  bool
	used bool
}

// Defaults: 64 Ki entries of records up to 1 KiB, and 32 MiB in all.
const (
	defaultCacheEntries     = 64 << 10
	defaultCacheBytes       = 32 << 20
	defaultCacheRecordBytes = 1 << 10
	cacheSlotOverhead       = 160 // map and slot bookkeeping, counted per entry (about what they take)
)

func newLatestCache(entries, bytes, recordBytes int) *latestCache {
	return &latestCache{maxEntries: entries, maxBytes: bytes, maxRecordBytes: recordBytes, idx: map[string]int32{}}
}

// clear drops every entry.
func (c *latestCache) clear() {
	clear(c.idx)
	c.slots, c.free = c.slots[:0], c.free[:0]
	c.hand, c.bytes, c.dirty = 0, 0, false
}

// get returns the cached state of key: the record and whether the key
// exists, and whether the cache knows it. The record's slices are shared:
// callers must not modify them (no caller does).
func (c *latestCache) get(key []byte) (rec record, live, found bool) {
	i, ok := c.idx[string(key)]
	if !ok {
		c.misses.Add(1)
		return rec, false, false
	}
	s := &c.slots[i]
	s.ref = true
	c.hits.Add(1)
	return s.rec, s.live, true
}

// set records that key now holds rec (live) or does not exist (!live).
// The value and labels are copied, empty ones as nil, as getLatest
// returns them; the copy is returned, with whether it was cached.
func (c *latestCache) set(key []byte, rec *record, live bool) (record, bool) {
	if c.maxEntries <= 0 {
		return record{}, false
	}
	c.dirty = true
	size := len(key) + cacheSlotOverhead
	var r record
	if live {
		n := len(rec.value) + len(rec.labels)
		if n > c.maxRecordBytes {
			c.drop(key)
			return record{}, false
		}
		size += n
		r = *rec
		r.value, r.labels = nil, nil
		if n > 0 {
			buf := make([]byte, n)
			copy(buf, rec.value)
			copy(buf[len(rec.value):], rec.labels)
			if len(rec.value) > 0 {
				r.value = buf[:len(rec.value):len(rec.value)]
			}
			if len(rec.labels) > 0 {
				r.labels = buf[len(rec.value):]
			}
		}
	}
	if i, ok := c.idx[string(key)]; ok {
		s := &c.slots[i]
		c.bytes += size - slotSize(s)
		s.rec, s.live = r, live
		c.evict(int(i))
		return r, true
	}
	for len(c.idx) >= c.maxEntries || c.bytes+size > c.maxBytes {
		if !c.evictOne(-1) {
			break
		}
	}
	if size > c.maxBytes {
		return r, false
	}
	var i int32
	if n := len(c.free); n > 0 {
		i, c.free = c.free[n-1], c.free[:n-1]
	} else {
		c.slots = append(c.slots, cacheSlot{})
		i = int32(len(c.slots) - 1)
	}
	c.slots[i] = cacheSlot{key: string(key), rec: r, live: live, used: true}
	c.idx[c.slots[i].key] = i
	c.bytes += size
	return r, true
}

func slotSize(s *cacheSlot) int {
	return len(s.key) + cacheSlotOverhead + len(s.rec.value) + len(s.rec.labels)
}

// evict evicts other entries until the cache is within its byte bound
// again, keeping slot keep.
func (c *latestCache) evict(keep int) {
	for c.bytes > c.maxBytes {
		if !c.evictOne(keep) {
			return
		}
	}
}

// evictOne evicts one entry other than slot keep, by the clock; false if
// there is none.
func (c *latestCache) evictOne(keep int) bool {
	if len(c.idx) == 0 || (len(c.idx) == 1 && keep >= 0) {
		return false
	}
	for {
		if c.hand >= len(c.slots) {
			c.hand = 0
		}
		i := c.hand
		c.hand++
		s := &c.slots[i]
		if !s.used || i == keep {
			continue
		}
		if s.ref {
			s.ref = false
			continue
		}
		c.remove(int32(i))
		return true
	}
}

// drop forgets key.
func (c *latestCache) drop(key []byte) {
	if i, ok := c.idx[string(key)]; ok {
		c.remove(i)
	}
}

func (c *latestCache) remove(i int32) {
	s := &c.slots[i]
	c.bytes -= slotSize(s)
	delete(c.idx, s.key)
	*s = cacheSlot{}
	c.free = append(c.free, i)
}

// LatestCacheStats returns the apply-time latest-record cache's hits and
// misses since the store was opened. Safe from any goroutine.
func (s *Store) LatestCacheStats() (hits, misses uint64) {
	return s.cache.hits.Load(), s.cache.misses.Load()
}
