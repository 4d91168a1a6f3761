package storage

import (
	"context"
	"strings"
	"time"
)

// DBSize is the bytes Pebble's files take in the data dir: tables, blob
// files, write-ahead logs, manifests and options files, live or waiting to
// be deleted. It is measured on the filesystem, not taken from Pebble's
// metrics: after a reopen those count neither the blob files (where value
// separation puts every large value, so most of a store's bytes) nor the
// logs replayed at open, and a 345 MiB store read as 29.5 MiB, under any
// quota. The ballast, the witness and the snapshot staging dir are not
// Pebble's and are not counted; nor are the used write-ahead log files
// Pebble keeps for reuse (up to five, of up to a memtable each): they are
// room for the next logs, not data, and no delete or compaction can
// shrink them, so counted against a quota they kept it exceeded after
// everything was deleted.
//
// The raft log's segments (raftlog/) are counted too.
func (s *Storage) DBSize() uint64 { return s.pebbleSize() + s.LogBytes() }

// pebbleSize is DBSize without the raft log.
func (s *Storage) pebbleSize() uint64 {
	names, err := s.rawFS.List(s.dir)
	if err != nil {
		return s.db.Metrics().DiskSpaceUsage()
	}
	var n uint64
	for _, name := range names {
		if !isPebbleFile(name) {
			continue
		}
		if fi, err := s.rawFS.Stat(s.rawFS.PathJoin(s.dir, name)); err == nil && !fi.IsDir() {
			n += uint64(fi.Size())
		}
	}
	return n - min(n, s.db.Metrics().WAL.ObsoletePhysicalSize)
}

func isPebbleFile(name string) bool {
	for _, suffix := range []string{".sst", ".blob", ".log"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return strings.HasPrefix(name, "MANIFEST-") || strings.HasPrefix(name, "OPTIONS-")
}

// AwaitObsoleteDeleted waits, up to limit or ctx's end, until Pebble has
// deleted the tables and blob files a flush or compaction replaced: it
// does so in the background after the compaction returns, and a file an
// open iterator still reads (a zombie) goes only once that iterator
// closes, which a reader does within moments. A size read before then
// counts them: a defragmentation reported 141 MiB -> 46.5 MiB while the
// directory held 21 MB moments later. It reports whether every replaced
// file was gone in time.
func (s *Storage) AwaitObsoleteDeleted(ctx context.Context, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m := s.db.Metrics()
		if m.Table.ObsoleteCount == 0 && m.BlobFiles.ObsoleteCount == 0 &&
			m.Table.ZombieCount == 0 && m.BlobFiles.ZombieCount == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}
