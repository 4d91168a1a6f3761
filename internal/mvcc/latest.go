package mvcc

// latestCache is the apply goroutine's memory of the newest version of
// the keys it wrote last: a put or delete needs the version it replaces
// (its create revision, version, lease, and the previous value its event
// carries), and reading it back from Pebble was up to a fifth of a
// follower's CPU under puts, mostly reading blocks of freshly flushed
// tables that the block cache had never seen.
//
// Only the apply goroutine touches it, so it needs no lock. It is
// written as the batch is, and the batch commits whole, whatever its
// commands answered, or the member stops applying (raftnode: an apply
// that fails panics or marks the data damaged), so the cache never holds
// a write the state lacks. Purges never remove a key's newest live
// version (a purged tombstone and a remembered delete both read as no
// version). A snapshot install replaces the state: Store.Reload empties
// the cache.
type latestCache struct {
	m     map[string]latestEntry
	bytes int
}

// latestEntry is a key's newest version; live false: it has none (its
// newest record is a tombstone).
type latestEntry struct {
	rec  record
	live bool
}

const (
	// latestCacheBytes bounds the cache: keys, values and labels plus
	// latestEntryBytes each. When it is full it is emptied.
	latestCacheBytes = 32 << 20
	latestEntryBytes = 112
	// latestMaxValue is the largest value kept: a bigger one is read
	// back from Pebble, whose value separation keeps it out of the way.
	latestMaxValue = 4 << 10
)

// get returns key's newest version as the cache knows it: found says
// whether the cache knows, live whether there is a version.
func (c *latestCache) get(key []byte) (rec record, live, found bool) {
	e, ok := c.m[string(key)]
	return e.rec, e.live, ok
}

// put records key's newest version, rec, or its deletion (rec nil). The
// record's slices are kept, not copied: nothing writes to them after.
func (c *latestCache) put(key []byte, rec *record) {
	if rec != nil && len(rec.value) > latestMaxValue {
		c.forget(key)
		return
	}
	if old, ok := c.m[string(key)]; ok {
		c.bytes -= len(key) + len(old.rec.value) + len(old.rec.labels) + latestEntryBytes
	}
	e := latestEntry{}
	if rec != nil {
		e = latestEntry{rec: *rec, live: true}
	}
	n := len(key) + len(e.rec.value) + len(e.rec.labels) + latestEntryBytes
	if c.m == nil || c.bytes+n > latestCacheBytes {
		c.m, c.bytes = make(map[string]latestEntry), 0
	}
	c.m[string(key)] = e
	c.bytes += n
}

func (c *latestCache) forget(key []byte) {
	if old, ok := c.m[string(key)]; ok {
		c.bytes -= len(key) + len(old.rec.value) + len(old.rec.labels) + latestEntryBytes
		delete(c.m, string(key))
	}
}

// reset empties the cache: the state was replaced.
func (c *latestCache) reset() { c.m, c.bytes = nil, 0 }
