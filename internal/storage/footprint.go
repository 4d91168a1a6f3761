package storage

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The footprint: what a store takes on disk beyond its data is sized to
// the store, not fixed. Pebble preallocates each write-ahead log file in
// steps of 110% of the memtable size and keeps up to
// memTableStopWrites+1 used log files for recycling, and the ballast
// holds what a flush needs at ENOSPC; with a fixed 64 MiB memtable and a
// 64 MiB ballast a node holding a dozen keys took 135 MB.
//
// The memtable size is picked at Open from the data already there: a
// quarter of it, rounded up to a power of two, between minMemTable and
// maxMemTable. A store that grows past it gets the larger size at its
// next start; until then it flushes smaller tables more often, which
// costs compaction work but never correctness. The ballast is twice the
// memtable (a flush writes at most one memtable's worth of table, the
// log being written holds at most one more), at most maxBallast.
const (
	minMemTable = 4 << 20
	maxMemTable = 64 << 20
	maxBallast  = 64 << 20
)

// memTableSizeFor is the memtable size for a store whose tables and blob
// files take data bytes.
func memTableSizeFor(data uint64) uint64 {
	size := uint64(minMemTable)
	for size < data/4 && size < maxMemTable {
		size *= 2
	}
	return size
}

// ballastFor is the ballast's size: configured > 0 is kept, < 0 is none,
// 0 is twice the memtable, at most maxBallast.
func ballastFor(configured int64, memTable uint64) int64 {
	switch {
	case configured > 0:
		return configured
	case configured < 0:
		return 0
	}
	return int64(min(2*memTable, maxBallast))
}

// MemTableSize is the memtable size Open picked (memTableSizeFor).
func (s *Storage) MemTableSize() uint64 { return s.memTable }

// BallastBytes is the ballast file's size (0: none kept).
func (s *Storage) BallastBytes() int64 { return s.ballastBytes }

// dataBytes is what the tables and blob files in dir take: the store's
// data and history, without its logs. Read from the directory listing,
// before Pebble opens.
func dataBytes(fs vfs.FS, dir string) uint64 {
	names, err := fs.List(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		if !strings.HasSuffix(name, ".sst") && !strings.HasSuffix(name, ".blob") {
			continue
		}
		if fi, err := fs.Stat(fs.PathJoin(dir, name)); err == nil && !fi.IsDir() {
			n += uint64(fi.Size())
		}
	}
	return n
}
