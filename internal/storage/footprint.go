package storage

import (
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The footprint: what a store takes on disk beyond its data is sized to
// the store, not fixed. With a fixed 64 MiB memtable, Pebble preallocated
// each write-ahead log file in steps of 110% of it (70 MiB), and with a
// 64 MiB ballast beside it a node holding a dozen keys took 135 MB.
//
// The memtable size is picked at Open from the data already there: a
// quarter of it, rounded up to a power of two, between minMemTable and
// maxMemTable. A store that grows past it gets the larger size at its
// next start. The floor is 16 MiB although the raft log has left the LSM
// (its entries used to die in the memtable): a 4 MiB floor (Pebble's
// default) did a median 5,787 puts/s against 6,260 with 16 MiB in five
// paired runs of 400,000 puts at 64 clients (0.92x, p90 higher in every
// run; BENCHMARKS.md, "Stream workers, and the footprint after defrag").
// The memtable is memory, not disk, once the ballast is not its size.
//
// The write-ahead log's preallocation is capped at walPreallocateStep
// (walFS), whatever the memtable: it is what an idle store holds, and
// the speed of a log write comes from Pebble recycling log files, which
// keep their blocks, not from preallocating them.
//
// The ballast is the largest write the node accepts
// (Options.LargestWrite: --max-value-bytes plus the request envelope,
// 5 MiB by default), and at least minBallast, one raft log segment. It
// is not the memtable's size: the NOSPACE alarm already counts what the
// memtables hold as taken (a flush needs about that much), so the
// ballast only has to absorb the writes in flight between a disk that
// filled behind the alarm's back and the alarm's commit. Sized to the
// memtable (16 MiB at least) it was six times the live data of a member
// holding 10,000 values of 256 bytes.
const (
	minMemTable        = 16 << 20
	maxMemTable        = 64 << 20
	walPreallocateStep = 1 << 20
	minBallast         = DefaultSegmentBytes
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
// 0 is the largest write, but at least minBallast.
func ballastFor(configured int64, largestWrite int64) int64 {
	switch {
	case configured > 0:
		return configured
	case configured < 0:
		return 0
	}
	return max(largestWrite, minBallast)
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

// walFS caps the preallocation of write-ahead log files (see above).
type walFS struct{ vfs.FS }

func (fs walFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return walFile(name, f, err)
}

func (fs walFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return walFile(newname, f, err)
}

// Unwrap is the filesystem walFS wraps.
func (fs walFS) Unwrap() vfs.FS { return fs.FS }

func walFile(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return cappedPreallocFile{f}, nil
}

type cappedPreallocFile struct{ vfs.File }

func (f cappedPreallocFile) Preallocate(off, n int64) error {
	return f.File.Preallocate(off, min(n, walPreallocateStep))
}
