package storage

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// The block cache has the configured size (64 MiB unset), and once the
// store is closed its stats read as zero instead of touching the cache
// Close released (a /metrics scrape can race a shutdown).
func TestBlockCacheSizeAndClose(t *testing.T) {
	for _, tc := range []struct{ set, want int64 }{{0, 64 << 20}, {4 << 20, 4 << 20}} {
		s, err := Open(t.TempDir(), Options{NoSync: true, CacheBytes: tc.set})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.BlockCache().CapacityBytes; got != tc.want {
			t.Errorf("CacheBytes %d: capacity %d, want %d", tc.set, got, tc.want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := s.BlockCache(); got != (BlockCacheStats{}) {
			t.Errorf("after Close: %+v, want zero", got)
		}
	}
}

// Blocks read from the tables stay in the block cache while the memtables
// hold their full reservation in it. Pebble charges each memtable's size
// to the cache; a cache sized without room for them (as before) held no
// block at all, and every read went to the files.
func TestBlockCacheHoldsBlocksBesideMemtables(t *testing.T) {
	// 4 MiB memtables and a 2 MiB cache stand for the real 64 MiB and
	// 64 MiB: the same ratio, reached with a few MiB of writes.
	s, err := Open(t.TempDir(), Options{NoSync: true, CacheBytes: 2 << 20, memTableSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := s.DB()
	// Pebble's memtables start at 256 KiB and double each time one fills,
	// up to their full size, which a long-running member's always are.
	for i := range 64 {
		if err := db.Set(fmt.Appendf(nil, "s/mh/fill%03d", i), make([]byte, 256<<10), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "s/mk/k%06d", i) }
	const n = 5000
	for i := range n {
		if err := db.Set(key(i), make([]byte, 200), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil { // into a table: reads now go through the cache
		t.Fatal(err)
	}
	if mt := db.Metrics().MemTable; mt.Size < 4<<20 {
		t.Fatalf("memtables reserve %d bytes, want at least one full 4 MiB memtable for the test to mean anything", mt.Size)
	}
	before := s.BlockCache()
	for range 2 {
		for i := range n {
			_, c, err := db.Get(key(i))
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	}
	after := s.BlockCache()
	if after.SizeBytes == 0 || after.Hits-before.Hits < n {
		t.Fatalf("block cache after reading %d keys twice from a table: %d bytes held, %d hits, %d misses; want blocks kept and most reads hits",
			n, after.SizeBytes, after.Hits-before.Hits, after.Misses-before.Misses)
	}
}
