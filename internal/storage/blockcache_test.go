package storage

import "testing"

// The block cache has the configured size (256 MiB unset), and once the
// store is closed its stats read as zero instead of touching the cache
// Close released (a /metrics scrape can race a shutdown).
func TestBlockCacheSizeAndClose(t *testing.T) {
	for _, tc := range []struct{ set, want int64 }{{0, 256 << 20}, {4 << 20, 4 << 20}} {
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
