package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/internal/lograte"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

// ErrDiskFull is wrapped by errors that come from the disk being full
// (ENOSPC), so callers can tell them from other I/O failures.
var ErrDiskFull = errors.New("no space left on device")

// IsDiskFull reports whether err, or the message of a Pebble failure,
// comes from ENOSPC. Pebble flattens some errors to text, so the message
// is checked too.
func IsDiskFull(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrDiskFull) {
		return true
	}
	return strings.Contains(err.Error(), syscall.ENOSPC.Error())
}

// FatalError is what Options.Fatal receives: Pebble reached a state it
// cannot continue from (a failed WAL or MANIFEST write). The database must
// not be used any more.
type FatalError struct {
	Msg string
}

func (e *FatalError) Error() string { return "pebble cannot continue: " + e.Msg }

// Is makes errors.Is(err, ErrDiskFull) hold when the cause was ENOSPC.
func (e *FatalError) Is(target error) bool {
	return target == ErrDiskFull && strings.Contains(e.Msg, syscall.ENOSPC.Error())
}

// DiskUsage is the free space of the filesystem holding the database and
// the bytes the database occupies on it.
type DiskUsage struct {
	// AvailBytes is what the filesystem still lets this process write.
	AvailBytes uint64
	// TotalBytes is the filesystem's size.
	TotalBytes uint64
	// LiveBytes is what the database holds on disk: its live
	// write-ahead log, tables and blob files. The output of a flush or
	// compaction still being written and the files waiting to be deleted
	// are not counted, so it does not jump (by up to a memtable while a
	// flush writes the table that replaces the log) and fall back as
	// Pebble rewrites the same data. The quota (--quota-bytes) is on it.
	LiveBytes uint64
	// UnflushedBytes is the data in the memtables: flushing it needs
	// about that much free space again.
	UnflushedBytes uint64
}

// DiskUsage measures the free space where the database lives (statfs, or
// the test filesystem's answer) and the database's own size.
func (s *Storage) DiskUsage() (DiskUsage, error) {
	du, err := s.fs.GetDiskUsage(s.dir)
	if err != nil {
		return DiskUsage{}, fmt.Errorf("disk usage of %s: %w", s.dir, err)
	}
	m := s.db.Metrics()
	return DiskUsage{
		AvailBytes:     du.AvailBytes,
		TotalBytes:     du.TotalBytes,
		LiveBytes:      s.liveBytes(m),
		UnflushedBytes: m.MemTable.Size,
	}, nil
}

// LiveBytes is what the database's live files take: the write-ahead
// log and the tables and blob files of the current version; DBSize less
// the obsolete and zombie files waiting to be deleted, manifests and
// the output of flushes and compactions in progress. It is `db size in
// use`, and what the quota is compared with.
func (s *Storage) LiveBytes() uint64 { return s.liveBytes(s.db.Metrics()) }

func (s *Storage) liveBytes(m *pebble.Metrics) uint64 {
	// The WAL's logical size: a fresh WAL's physical size can read 0
	// while it already holds the writes not yet flushed to tables. The
	// blob files' size comes from the current version: the local
	// counter starts at 0 when the database is reopened.
	live := max(m.WAL.PhysicalSize, m.WAL.Size) + m.Table.Local.LiveSize + m.BlobFiles.LiveSize
	if size := s.pebbleSize(); size > 0 {
		live = min(live, size)
	}
	// The raft log holds every change since its last compaction, among
	// them those the state keeps only in its memtables until they are
	// flushed: counted, a burst of writes reaches the quota as it lands
	// on disk, and the log's truncation under an alarm (Reclaim) gives
	// it back.
	return live + s.LogBytes()
}

// TruncateLogToApplied compacts the raft log up to the applied index: a
// follower behind it is then sent a snapshot. For Reclaim, when space
// matters more than the catch-up entries.
func (s *Storage) TruncateLogToApplied() error {
	view := s.db.NewSnapshot()
	applied, err := AppliedIndex(view)
	var cs *raftpb.ConfState
	if err == nil {
		cs, err = ConfState(view)
	}
	view.Close()
	if err != nil || applied == 0 {
		return err
	}
	if err := s.compactLog(applied, applied, cs, true); err != nil {
		return err
	}
	return s.rotateLogAt(applied)
}

// rotateLogAt starts a new raft log segment when the log holds nothing
// above applied, and deletes the segment that was being written: it holds
// only entries the state already has, up to SegmentBytes of them, which
// would otherwise stay on disk until the next cut. Not on a nearly full
// disk: a segment that cannot be created stops the node, and the
// segment kept is at most SegmentBytes.
func (s *Storage) rotateLogAt(applied uint64) error {
	s.mu.Lock()
	if s.lastIndex != applied {
		s.mu.Unlock()
		return nil
	}
	if du, err := s.fs.GetDiskUsage(s.dir); err != nil || du.AvailBytes < 4*uint64(s.segBytes) {
		s.mu.Unlock()
		return nil
	}
	if err := s.rlog.rotate(applied+1, s.hardState); err != nil {
		s.mu.Unlock()
		s.logFailed(err) // never returns
	}
	s.mu.Unlock()
	return s.rlog.releaseTo(applied)
}

// Reclaim makes space that deletes and a history purge freed count on
// disk: it flushes the memtable (so the WAL holding the deleted data can
// go) and compacts the state, which drops its tombstones and deleted
// versions. (The raft log frees space by deleting whole segments.) It needs some free space to write the
// compacted tables; the reserve is kept for that.
func (s *Storage) Reclaim() error {
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := s.db.Compact(context.Background(), StateStart, StateEnd, true); err != nil {
		return fmt.Errorf("compact state: %w", err)
	}
	return nil
}

// pebbleLogger routes Pebble's messages to the node's log. Errors are
// rate limited per kind: a full disk makes Pebble retry (and report) a
// failing flush or compaction in a tight loop, and one line per interval
// says as much as a million. Fatalf never panics: it reports the failure
// to onFatal once and parks the calling goroutine for good, since Pebble's
// state after a fatal error (a commit pipeline that cannot move on) must
// not be used; the node stops without it.
type pebbleLogger struct {
	log     *slog.Logger
	onFatal func(error)
	limit   *lograte.Limiter
	// diskFull, while pebble.Open runs, gets the first ENOSPC error: Open
	// waits for the flush of the replayed log, which retries forever on a
	// full disk.
	diskFull chan error

	fatalOnce sync.Once
}

func newPebbleLogger(log *slog.Logger, onFatal func(error), every time.Duration) *pebbleLogger {
	if log == nil {
		log = slog.Default()
	}
	if every <= 0 {
		every = 10 * time.Second
	}
	return &pebbleLogger{log: log.With("component", "pebble"), onFatal: onFatal, limit: lograte.New(every), diskFull: make(chan error, 1)}
}

func (l *pebbleLogger) noteDiskFull(err error) {
	if IsDiskFull(err) {
		select {
		case l.diskFull <- err:
		default:
		}
	}
}

func (l *pebbleLogger) Infof(string, ...any) {}

func (l *pebbleLogger) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	kind := format
	if IsDiskFull(errors.New(msg)) {
		kind = "enospc:" + format
	}
	if n, ok := l.limit.Allow(kind); ok {
		l.log.Error(msg, "suppressed_since_last", n)
	}
}

func (l *pebbleLogger) Fatalf(format string, args ...any) {
	l.fatal(&FatalError{Msg: fmt.Sprintf(format, args...)})
}

// fatal reports err once and parks the calling goroutine for good.
func (l *pebbleLogger) fatal(err *FatalError) {
	l.noteDiskFull(err)
	l.fatalOnce.Do(func() {
		hint := "the node stops; see the log above for the cause"
		if errors.Is(err, ErrDiskFull) {
			hint = "the disk is full: free space (or grow the volume) and restart the node; acknowledged writes are in the synced log"
		}
		l.log.Error("storage failed; stopping the node", "err", err.Msg, "what_to_do", hint)
		if l.onFatal != nil {
			go l.onFatal(err)
		}
	})
	// Never return into Pebble: the caller would carry on as if the write
	// had succeeded.
	select {}
}

// eventListener logs Pebble's background errors (failed flushes and
// compactions, e.g. at ENOSPC) once per kind per interval.
func (l *pebbleLogger) eventListener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			l.noteDiskFull(err)
			kind := "background"
			if IsDiskFull(err) {
				kind = "background-enospc"
			}
			if n, ok := l.limit.Allow(kind); ok {
				l.log.Error("background error (flush or compaction failed; Pebble retries)", "err", err, "disk_full", IsDiskFull(err), "suppressed_since_last", n)
			}
		},
	}
}

// minOpenFreeBytes is the free space opening a database needs beyond its
// write-ahead log (which Open flushes to tables): a new WAL, a MANIFEST,
// an OPTIONS file.
const minOpenFreeBytes = 4 << 20

// openPebble opens the database, refusing at once, with a message that
// says what to do, when the disk is too full to do so. Pebble itself would
// retry flushing the replayed log forever: the node would never listen,
// burn CPU and fill its log.
//
// released reports that the ballast file was deleted to make room: the
// disk was full at start, and the space the ballast held now looks free
// although it is the reserve (Storage.BallastReleasedAtOpen).
func openPebble(dir string, fs vfs.FS, po *pebble.Options, pl *pebbleLogger) (db *pebble.DB, released bool, err error) {
	// Flushing the replayed log needs up to its size (less when it
	// compresses); the ballast is released for that. Below the bare
	// minimum, give up at once; otherwise a flush that meets ENOSPC
	// gives up below.
	var walBytes uint64
	if ls, err := fs.List(dir); err == nil {
		for _, name := range ls {
			if strings.HasSuffix(name, ".log") {
				if fi, err := fs.Stat(fs.PathJoin(dir, name)); err == nil {
					walBytes += uint64(fi.Size())
				}
			}
		}
	}
	need := uint64(minOpenFreeBytes)
	if releaseBallastIfFull(fs, dir, need+walBytes) {
		released = true
		pl.log.Warn("disk nearly full at start: released the ballast file; the node starts refusing writes until space is freed", "dir", dir)
	}
	if du, err := fs.GetDiskUsage(dir); err == nil {
		if du.AvailBytes < need {
			return nil, released, fmt.Errorf("data dir %s: %w: %s free, opening the database needs at least %s (and up to %s more to flush its write-ahead log); free space on that filesystem and start again",
				dir, ErrDiskFull, FormatBytes(du.AvailBytes), FormatBytes(need), FormatBytes(walBytes))
		}
	}
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		db, err := pebble.Open(dir, po)
		done <- result{db, err}
	}()
	select {
	case r := <-done:
		return r.db, released, r.err
	case err := <-pl.diskFull:
		// Open is stuck behind a flush that cannot succeed. Leave it: the
		// caller gives up on this database (the process normally exits).
		return nil, released, fmt.Errorf("data dir %s: %w while opening (%v); free space on that filesystem and start again", dir, ErrDiskFull, err)
	}
}

// FormatBytes prints n in binary units, for messages.
func FormatBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// defaultFS is the FS Pebble uses when Options.FS is nil.
func defaultFS(fs vfs.FS) vfs.FS {
	if fs == nil {
		return vfs.Default
	}
	return fs
}

// BallastName is the file in the data dir that holds disk space in
// reserve: at ENOSPC it is deleted and Pebble's failed write retried, so
// a full disk does not fail the commit pipeline (Pebble cannot recover
// from that). It is put back once there is room again.
const BallastName = "DKV_BALLAST"

// wrapFS wraps fs so that ENOSPC releases the ballast and the write is
// retried once (vfs.OnDiskFull).
func (s *Storage) wrapFS(fs vfs.FS, onDiskFull func()) vfs.FS {
	return vfs.OnDiskFull(fs, func() {
		path := fs.PathJoin(s.dir, BallastName)
		if err := fs.Remove(path); err == nil {
			s.pl.log.Warn("disk full: released the ballast file to finish the write in progress", "file", path, "bytes", s.ballastBytes)
		}
		if onDiskFull != nil {
			onDiskFull()
		}
	})
}

// EnsureBallast makes the ballast file what Open decided: created if
// missing, replaced if an earlier start left one of another size (the
// size is the file's length; a ballast from before it was recorded has
// length 0), removed if none is wanted. The space is allocated
// (fallocate), or written where the filesystem cannot allocate, so it is
// really held.
func (s *Storage) EnsureBallast() error {
	path := s.rawFS.PathJoin(s.dir, BallastName)
	fi, statErr := s.rawFS.Stat(path)
	switch {
	case s.ballastBytes <= 0:
		if statErr == nil {
			return s.rawFS.Remove(path)
		}
		return nil
	case statErr == nil && fi.Size() == s.ballastBytes:
		return nil
	case statErr == nil && fi.Size() > s.ballastBytes:
		// Smaller now: free the old one first.
		if err := s.rawFS.Remove(path); err != nil {
			return fmt.Errorf("replace ballast file: %w", err)
		}
	}
	tmp := path + ".tmp"
	if err := writeBallast(s.rawFS, tmp, s.ballastBytes); err != nil {
		s.rawFS.Remove(tmp)
		return fmt.Errorf("create ballast file: %w", err)
	}
	return s.rawFS.Rename(tmp, path)
}

// writeBallast creates a file of n bytes that really holds them: it
// allocates them and then writes the last byte, so the file's length
// records its size; where the filesystem cannot allocate, it writes
// zeros.
func writeBallast(fs vfs.FS, path string, n int64) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if f, err = fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified); err != nil {
		return err
	}
	if err = f.Preallocate(0, n); err == nil {
		_, err = f.WriteAt([]byte{0}, n-1)
	} else {
		buf := make([]byte, 1<<20)
		var off int64
		for err = nil; off < n && err == nil; off += int64(len(buf)) {
			_, err = f.WriteAt(buf[:min(n-off, int64(len(buf)))], off)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// BallastReleasedAtOpen reports that Open deleted the ballast file
// because the disk was too full to open with it. The space it held then
// looks free, but it is the reserve that absorbs the next ENOSPC: the
// caller must refuse writes that add data until there is room to put the
// ballast back (EnsureBallast), not merely room above its own reserve.
func (s *Storage) BallastReleasedAtOpen() bool { return s.ballastReleasedAtOpen }

// releaseBallastIfFull deletes the ballast before opening when the disk
// is too full to open with it: that is what it is for.
func releaseBallastIfFull(fs vfs.FS, dir string, need uint64) bool {
	du, err := fs.GetDiskUsage(dir)
	if err != nil || du.AvailBytes >= need {
		return false
	}
	return fs.Remove(fs.PathJoin(dir, BallastName)) == nil
}
