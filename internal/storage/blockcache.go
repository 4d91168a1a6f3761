package storage

// BlockCacheStats is what the block cache holds and how reads fared
// against it, for /metrics: an operator sizing --cache-bytes compares the
// misses with the hits.
type BlockCacheStats struct {
	CapacityBytes int64 // the configured size (Options.CacheBytes)
	SizeBytes     int64 // what it holds now
	Hits, Misses  int64 // since the store was opened
}

// BlockCache reports the block cache's size and hit counts; zero once the
// store is closed (the cache is released with the database).
func (s *Storage) BlockCache() BlockCacheStats {
	s.cacheMu.RLock()
	defer s.cacheMu.RUnlock()
	if s.cache == nil {
		return BlockCacheStats{}
	}
	m := s.cache.Metrics()
	return BlockCacheStats{CapacityBytes: s.cacheBytes, SizeBytes: m.Size, Hits: m.Hits, Misses: m.Misses}
}
