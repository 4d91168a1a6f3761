package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
	"github.com/dkv-io/dkv/internal/keys"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

var (
	keyHardState = keys.RaftHardState
	keySnapMeta  = keys.RaftSnapMeta
	entryPrefix  = keys.RaftEntryPrefix
	metaPrefix   = keys.LocalMetaPrefix

	keyApplied   = keys.AppliedIndex
	keyConfState = keys.ConfState

	// StatePrefix bounds the replicated state machine: [StateStart, StateEnd).
	StateStart = keys.StateStart
	StateEnd   = keys.StateEnd
)

// Options configure Open.
type Options struct {
	// FS, when set, replaces the OS filesystem (tests use vfs.NewMem()).
	FS vfs.FS
	// NoSync skips fsync on raft log appends. Unsafe; tests and CPU
	// benchmarks only.
	NoSync bool
	// CacheBytes is Pebble's block cache size for blocks (default 64 MiB);
	// the memtables' reservation comes on top (see Open).
	CacheBytes int64
	// WitnessInterval is how often the durability witness is refreshed
	// (default DefaultWitnessInterval). See witness.go.
	WitnessInterval time.Duration
	// Logger receives storage warnings and Pebble's errors, rate limited
	// (default: stderr).
	Logger *slog.Logger
	// OnDamage is called, once, when Pebble reports corruption of a file
	// while running (a checksum mismatch reading an SST, say). The error
	// is a *DamageError. It must not block.
	OnDamage func(error)
	// Fatal is called once, on its own goroutine, when Pebble cannot
	// continue (a failed WAL or MANIFEST write, e.g. at ENOSPC); the
	// database must then not be used again. See space.go.
	Fatal func(error)
	// BallastBytes is the size of the ballast file kept in the data dir
	// and released at ENOSPC (space.go): 0 makes it the largest write
	// (see ballastFor), a negative value keeps none.
	BallastBytes int64
	// LargestWrite is the largest single write the node accepts (a
	// request at the size limit): the default ballast is at least that,
	// so a write that meets ENOSPC fits once the ballast is released.
	LargestWrite int64
	// OnDiskFull is called (inside the write path: keep it quick) when a
	// write met ENOSPC and the ballast was released.
	OnDiskFull func()
	// SegmentBytes is the size at which the raft log moves to a new
	// segment file (0: DefaultSegmentBytes).
	SegmentBytes int64

	// memTableSize, if set, replaces the size memTableSizeFor picks:
	// this package's tests fill full-size memtables with a few MiB of
	// writes.
	memTableSize uint64
}

// Storage owns the node's Pebble database.
type Storage struct {
	*raft.MemoryStorage

	db *pebble.DB
	// cache is the DB's block cache (the DB holds the reference), nil
	// once Close has released it; cacheMu guards that. cacheBytes is the
	// blocks' share of it (Options.CacheBytes; see Open).
	cacheMu    sync.RWMutex
	cache      *pebble.Cache
	cacheBytes int64
	dir        string
	fs         vfs.FS // what Pebble writes through (ENOSPC-aware)
	sync       bool
	log        *slog.Logger

	rawFS        vfs.FS // fs without the ENOSPC wrapper, for the ballast
	ballastBytes int64  // the ballast's size, decided at Open (<= 0: none)
	memTable     uint64 // the memtable size, decided at Open
	// ballastReleasedAtOpen: Open deleted the ballast to open on a full
	// disk (BallastReleasedAtOpen).
	ballastReleasedAtOpen bool
	pl                    *pebbleLogger

	// rlog is the raft log (raftlog.go); nil until Open has read it.
	rlog *raftLog
	// migrated: this Open migrated a format-1 data dir, whose backup is
	// dropped at the first log compaction (format.go).
	migrated bool
	segBytes int64 // Options.SegmentBytes

	mu        sync.Mutex
	lastIndex uint64            // last log index persisted to the raft log
	hardState *raftpb.HardState // last HardState persisted (MemoryStorage.InitialState is not safe to call concurrently)
	// synced is the raft state as of the last synced write (durable), for
	// the witness loop, which then need not sync the WAL itself; gen
	// orders captures so an older one never replaces a newer.
	synced    witness
	syncedGen uint64
	gen       uint64

	wmu          sync.Mutex // serializes witness writes
	witnessed    witness    // the witness on disk
	witnessedGen uint64     // the gen of its capture
	haveWitness  bool
	witnessStop  chan struct{}
	witnessDone  chan struct{}
	// witnessKick gets a value (without blocking) whenever the raft state
	// the witness records may have moved on, so the witness loop sleeps
	// while nothing changes.
	witnessKick chan struct{}
	closeOnce   sync.Once
	// closing is set by Close before its flush; bgFailed then gets the
	// first background error (a failed flush, retried by Pebble for as
	// long as the disk stays full), so Close stops waiting for it.
	closing  atomic.Bool
	bgFailed chan error

	damage   atomic.Pointer[DamageError]
	onDamage func(error)

	// manifestTail, when set, is the current MANIFEST's incomplete end
	// found before Pebble opened it (manifest.go): named if the log turns
	// out to have lost entries.
	manifestTail *manifestTail
}

// Value separation (see Open). separateValues is a variable so that tests
// can write a data dir as a release without it did.
var separateValues = true

const separateMinBytes = 1024

// How many memtables may be queued before writes stall. They can reserve
// at most that many, and one kept for reuse, in the block cache. Their
// size is memTableSizeFor's (footprint.go).
const memTableStopWrites = 4

// Open opens (or creates) the database in dir and loads the raft log tail.
// Data that was durable and is damaged or missing is refused with a
// *DamageError (errors.Is(err, ErrDamaged)).
func Open(dir string, opts Options) (*Storage, error) {
	cache := opts.CacheBytes
	if cache == 0 {
		cache = 64 << 20
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	s := &Storage{MemoryStorage: raft.NewMemoryStorage(), dir: dir, sync: !opts.NoSync, log: log, onDamage: opts.OnDamage,
		rawFS: defaultFS(opts.FS), segBytes: opts.SegmentBytes}
	if s.segBytes <= 0 {
		s.segBytes = DefaultSegmentBytes
	}
	s.pl = newPebbleLogger(log, opts.Fatal, 0)
	s.fs = s.wrapFS(walFS{s.rawFS}, opts.OnDiskFull)
	newestWAL := s.newestWAL() // before Open, which starts a new one
	s.reportTornTail(newestWAL)
	// Before Pebble reads the MANIFEST: it would open an older version
	// past damage (manifest.go).
	tail, err := checkManifest(s.rawFS, dir)
	if err != nil {
		var de *DamageError
		if errors.As(err, &de) {
			s.attachWitness(de)
		}
		return nil, err
	}
	s.manifestTail = tail
	// Pebble accounts every memtable against the block cache: each
	// reserves its size there, the one being filled, those queued for
	// flush and one kept for reuse. With 64 MiB memtables a cache of the
	// same size held no block at all (0 hits: every previous-record read of
	// every put went to the table files). So the cache is created with
	// room for the most memtables there can be on top of the blocks' own
	// share: blocks always get at least cache bytes.
	memSize := memTableSizeFor(dataBytes(s.rawFS, dir))
	if opts.memTableSize > 0 {
		memSize = opts.memTableSize
	}
	s.memTable = memSize
	s.ballastBytes = ballastFor(opts.BallastBytes, opts.LargestWrite)
	c := pebble.NewCache(cache + int64(memSize)*(memTableStopWrites+1))
	defer c.Unref()
	s.cache, s.cacheBytes = c, cache
	po := &pebble.Options{
		Cache:                       c,
		FS:                          s.fs,
		MemTableSize:                memSize,
		MemTableStopWritesThreshold: memTableStopWrites,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		Logger:                      s.pl,
		// The raft log is the durability of record (raftlog.go): the
		// state is written to the memtables only, flushed to tables in
		// the background, and at every raft log compaction before the
		// segments that could rebuild it are deleted (CompactLog). After
		// a crash the state is what was last flushed, its applied index
		// with it, and raft applies the entries above that again. So a
		// put's state is not written a second time into a log of its
		// own (docs/design/storage-v2.md, step 2).
		DisableWAL: true,
		// FormatWALSyncChunks and later record, in each WAL chunk, how far
		// the log was synced: a damaged record followed by proof of a
		// later sync is reported as corruption instead of being taken for
		// a torn tail (with older formats Pebble replays up to the damage
		// and silently drops the rest). Existing stores are upgraded.
		FormatMajorVersion: pebble.FormatNewest,
	}
	// Bloom filters: most point reads on the write path are for keys that
	// are absent (a put's lock-holder and previous-record lookups); without
	// a filter each one reads an index and a data block of every table
	// whose range covers the key. Tables written before have no filter and
	// are read as before.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Value separation: values of at least separateMinBytes go to blob
	// files at flush, and compactions then move references, not the values.
	// With large values, compactions rewriting them were the largest CPU
	// cost of a put (measured when a value was stored three times; the
	// history record still is rewritten by every compaction it meets).
	// From 128 bytes, paired runs showed no gain at 256-byte values
	// (BENCHMARKS.md, 2026-12-07 evening). Data written without separation
	// stays readable, and blob files stay readable with it off: the format
	// major version (FormatNewest, FormatValueSeparation) is unchanged.
	sep := separateValues
	po.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               sep,
			MinimumSize:           separateMinBytes,
			MaxBlobReferenceDepth: 10,
			RewriteMinimumAge:     time.Minute,
			TargetGarbageRatio:    0.2,
		}
	}
	// Corruption stops the node with a DamageError; every other background
	// error goes to the rate-limited logger (space.go).
	el := s.pl.eventListener()
	logBackground := el.BackgroundError
	el.DataCorruption = func(info pebble.DataCorruptionInfo) {
		s.reportDamage(&DamageError{Dir: dir, File: info.Path, Problem: fmt.Sprintf("Pebble found on-disk corruption: %v", info.Details)})
	}
	s.bgFailed = make(chan error, 1)
	el.BackgroundError = func(err error) {
		if pebble.IsCorruptionError(err) {
			s.reportDamage(&DamageError{Dir: dir, File: corruptFile(s.fs, dir, err), Problem: fmt.Sprintf("Pebble found on-disk corruption: %v", err)})
			return
		}
		if s.closing.Load() {
			select {
			case s.bgFailed <- err:
			default:
			}
		}
		logBackground(err)
	}
	po.EventListener = el
	db, released, err := openPebble(dir, s.rawFS, po, s.pl)
	if err == nil && newestWAL == "" {
		// A new store's first WAL predates its format upgrade and lacks
		// sync offsets; reopening starts one that has them.
		if err = db.Close(); err == nil {
			var again bool
			db, again, err = openPebble(dir, s.rawFS, po, s.pl)
			released = released || again
		}
	}
	s.ballastReleasedAtOpen = released
	if err != nil {
		if errors.Is(err, ErrDiskFull) {
			return nil, err
		}
		if pebble.IsCorruptionError(err) {
			de := &DamageError{Dir: dir, File: corruptFile(s.fs, dir, err), Problem: fmt.Sprintf("Pebble cannot open it: %v", err)}
			s.attachWitness(de)
			return nil, de
		}
		if m := sizeMismatch.FindStringSubmatch(err.Error()); m != nil {
			// A table file cut short (or grown) since the MANIFEST recorded
			// it: Pebble refuses it, but not as corruption.
			de := &DamageError{Dir: dir, File: m[1], Problem: fmt.Sprintf("a table file is %s bytes long where the MANIFEST recorded %s: it was cut short or overwritten", m[2], m[3])}
			s.attachWitness(de)
			return nil, de
		}
		return nil, fmt.Errorf("open pebble at %s: %w", dir, err)
	}
	s.db = db
	fail := func(err error) (*Storage, error) {
		db.Close()
		if d := s.damage.Load(); d != nil {
			return nil, d
		}
		if pebble.IsCorruptionError(err) {
			return nil, &DamageError{Dir: dir, File: corruptFile(s.fs, dir, err), Problem: fmt.Sprintf("Pebble found on-disk corruption: %v", err)}
		}
		return nil, err
	}
	if err := s.checkFormat(); err != nil {
		return fail(err)
	}
	installed, err := s.finishInstall()
	if err != nil {
		return fail(err)
	}
	contents, segs, err := s.readLog(installed)
	if err != nil {
		return fail(err)
	}
	if err := s.load(contents); err != nil {
		return fail(err)
	}
	if err := s.checkWitness(s.newestSegment(segs)); err != nil {
		return fail(err)
	}
	if d := s.damage.Load(); d != nil {
		return fail(d)
	}
	// Only now is anything written to the raft log: a data dir refused
	// above is left as it was found.
	if err := s.startLog(segs, installed); err != nil {
		return fail(err)
	}
	every := opts.WitnessInterval
	if every <= 0 {
		every = DefaultWitnessInterval
	}
	s.witnessStop, s.witnessDone = make(chan struct{}), make(chan struct{})
	s.witnessKick = make(chan struct{}, 1)
	s.kickWitness() // the state as loaded, once
	go s.witnessLoop(every)
	return s, nil
}

// newestWAL is the path of the highest-numbered WAL in the data dir, "" if
// none.
func (s *Storage) newestWAL() string {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return ""
	}
	var best wal.NumWAL
	name := ""
	for _, n := range names {
		if num, _, ok := wal.ParseLogFilename(n); ok && (name == "" || num > best) {
			best, name = num, n
		}
	}
	if name == "" {
		return ""
	}
	return s.fs.PathJoin(s.dir, name)
}

var (
	walInError  = regexp.MustCompile(`wal (\d+)`)
	pathInError = regexp.MustCompile(`path: (\S+)`)
	// Pebble's open-time consistency check (checkConsistency in open.go).
	sizeMismatch = regexp.MustCompile(`object size mismatch \((\S+)\): (\d+) \(disk\) != (\d+) \(MANIFEST\)`)
)

// attachWitness adds to de what the durability witness recorded as
// durable (the last raft index among it), when there is one: before the
// log is loaded it is the best account of what was good.
func (s *Storage) attachWitness(de *DamageError) {
	if w, _, _ := s.readWitness(); !w.empty() {
		de.Witness = &w
	}
}

// corruptFile names the file a Pebble corruption error is about, when it
// says.
func corruptFile(fs vfs.FS, dir string, err error) string {
	msg := fmt.Sprintf("%+v", err)
	if m := pathInError.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	if m := walInError.FindStringSubmatch(msg); m != nil {
		if n, perr := strconv.ParseUint(m[1], 10, 64); perr == nil {
			return fs.PathJoin(dir, fmt.Sprintf("%06d.log", n))
		}
	}
	return ""
}

// reportDamage records the first corruption Pebble reports and tells the
// owner.
func (s *Storage) reportDamage(d *DamageError) {
	// Not s.mu: Pebble calls this from inside reads.
	d.LastGood, _ = s.MemoryStorage.LastIndex()
	if !s.damage.CompareAndSwap(nil, d) {
		return
	}
	if s.onDamage != nil {
		s.onDamage(d)
	}
}

// Damage is the corruption Pebble reported while running, or nil.
func (s *Storage) Damage() error {
	if d := s.damage.Load(); d != nil {
		return d
	}
	return nil
}

func (s *Storage) logf(format string, args ...any) {
	s.log.Warn(fmt.Sprintf(format, args...), "component", "storage")
}

// DB is the underlying database, for the state machine.
func (s *Storage) DB() *pebble.DB { return s.db }

// Close records a final durability witness (unless the data is damaged)
// and closes the database.
func (s *Storage) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.witnessStop)
		<-s.witnessDone
		if s.damage.Load() == nil {
			if werr := s.refreshWitness(true); werr != nil {
				s.logf("cannot record the durability witness at close: %v", werr)
			}
		}
		if s.damage.Load() == nil {
			// A clean stop leaves the state in tables: the next start
			// need not apply the raft log again.
			// A flush that fails (a full disk) is retried by Pebble
			// without end; Close gives it up at the first failure, as
			// nothing is lost without it.
			s.closing.Store(true)
			if done, ferr := s.db.AsyncFlush(); ferr != nil {
				s.logf("cannot flush the state at close (the next start applies the raft log since the last flush): %v", ferr)
			} else {
				select {
				case <-done:
				case ferr := <-s.bgFailed:
					s.logf("cannot flush the state at close (the next start applies the raft log since the last flush): %v", ferr)
				}
			}
		}
		s.cacheMu.Lock()
		s.cache = nil
		s.cacheMu.Unlock()
		err = errors.Join(s.rlog.close(), s.db.Close())
	})
	return err
}

// load fills the MemoryStorage: the compaction snapshot (kept in Pebble,
// beside the state it describes), then the HardState and the entries
// after the snapshot from the raft log.
func (s *Storage) load(c *logContents) error {
	var snapIndex uint64
	if b, ok, err := get(s.db, keySnapMeta); err != nil {
		return err
	} else if ok {
		snap, err := decodeSnapMeta(b)
		if err != nil {
			return err
		}
		if err := s.MemoryStorage.ApplySnapshot(snap); err != nil {
			return err
		}
		snapIndex = snap.GetMetadata().GetIndex()
		s.lastIndex = snapIndex
	}
	if r := c.reset; r != nil && r.GetIndex() > snapIndex {
		// The log is reset only after the snapshot's state is durable.
		return s.logDamage(snapIndex, fmt.Sprintf("the raft log was reset to an installed snapshot at index %d, but the state holds only the snapshot at %d: the installed state is lost", r.GetIndex(), snapIndex))
	}
	if hs := c.hs; hs != nil {
		if hs.GetCommit() < snapIndex {
			// A commit index that moved without a sync (raft does not
			// ask for one) can be lost in a crash while a snapshot
			// marker above it was synced; raft refuses to start with
			// a commit index below its snapshot ("out of range"). The
			// snapshot is of applied, hence committed, entries.
			hs = proto.CloneOf(hs)
			hs.Commit = new(snapIndex)
		}
		if err := s.MemoryStorage.SetHardState(hs); err != nil {
			return err
		}
		s.hardState = hs
	}
	ents := c.ents
	for len(ents) > 0 && ents[0].GetIndex() <= snapIndex {
		ents = ents[1:]
	}
	if len(ents) > 0 && ents[0].GetIndex() != snapIndex+1 {
		// Raft's MemoryStorage.Append panics on a hole ("missing log
		// entry"): a deleted segment, or a state that went back (a
		// MANIFEST cut short) to before the log's start.
		return s.logDamage(snapIndex, fmt.Sprintf("the raft log has a hole: entries %d to %d are missing", snapIndex+1, ents[0].GetIndex()-1))
	}
	last := snapIndex
	if len(ents) > 0 {
		last = ents[len(ents)-1].GetIndex()
	}
	if cm := s.hardState.GetCommit(); cm > last {
		// Raft panics at start on a commit index past the log's end.
		return s.logDamage(last, fmt.Sprintf("the raft log ends at %d but its commit index is %d: committed entries are missing", last, cm))
	}
	if len(ents) > 0 {
		if err := s.MemoryStorage.Append(ents); err != nil {
			return fmt.Errorf("reload log: %w", err)
		}
		s.lastIndex = last
	}
	if c.torn != "" {
		s.logf("raft log segment %s ends in a torn tail: its last %d bytes hold no complete record and are dropped (a write the crash cut short, never acknowledged unless the durability witness says so); the log is recovered to index %d", c.torn, c.tornBytes, s.lastIndex)
	}
	return nil
}

// logDamage is the *DamageError for a raft log found inconsistent at
// load, whose entries up to lastGood are intact.
func (s *Storage) logDamage(lastGood uint64, problem string) *DamageError {
	de := &DamageError{Dir: s.dir, Problem: problem, LastGood: lastGood}
	if t := s.manifestTail; t != nil {
		de.File = t.path
		de.Problem += fmt.Sprintf("; the MANIFEST (Pebble's list of table files) ends in a record that is incomplete or fails its checksum, at byte %d of %d: it was damaged or cut short, and Pebble opened the older version of the data before it", t.offset, t.size)
	}
	s.attachWitness(de)
	return de
}

// InitialState is raft.Storage's: the persisted HardState, and the
// ConfState as of the applied index (which is what raft restarts from: it
// re-delivers only entries above the applied index).
func (s *Storage) InitialState() (*raftpb.HardState, *raftpb.ConfState, error) {
	hs, cs, err := s.MemoryStorage.InitialState()
	if err != nil {
		return nil, nil, err
	}
	applied, err := ConfState(s.db)
	if err != nil {
		return nil, nil, err
	}
	if len(applied.GetVoters()) > 0 || len(applied.GetLearners()) > 0 {
		cs = applied
	}
	return hs, cs, nil
}

// HasRaftState reports whether the node has ever persisted raft state, i.e.
// whether to restart rather than bootstrap.
func (s *Storage) HasRaftState() bool {
	hs, _, _ := s.MemoryStorage.InitialState()
	li, _ := s.MemoryStorage.LastIndex()
	return !raft.IsEmptyHardState(hs) || li > 0
}

// Save persists a Ready's HardState and entries (and, for an installed
// snapshot, its metadata), synced when mustSync, then exposes them to raft
// through the MemoryStorage. Per raft's contract, entries at index >= the
// first new entry's index are replaced.
func (s *Storage) Save(hs *raftpb.HardState, ents []*raftpb.Entry, mustSync bool) error {
	if raft.IsEmptyHardState(hs) && len(ents) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, cur := s.lastIndex+1, s.hardState
	if len(ents) > 0 {
		next = ents[len(ents)-1].GetIndex() + 1
	}
	if !raft.IsEmptyHardState(hs) {
		cur = hs
	}
	if err := s.rlog.save(hs, ents, mustSync && s.sync, next, cur); err != nil {
		s.mu.Unlock()
		s.logFailed(err) // never returns
	}
	if len(ents) > 0 {
		s.lastIndex = ents[len(ents)-1].GetIndex()
		if err := s.MemoryStorage.Append(ents); err != nil {
			return err
		}
	}
	if !raft.IsEmptyHardState(hs) {
		if err := s.MemoryStorage.SetHardState(hs); err != nil {
			return err
		}
		s.hardState = hs
	}
	s.kickWitness()
	if mustSync && s.sync {
		// Everything the raft log held is durable now.
		s.gen++
		s.synced, s.syncedGen = s.captureLocked(), s.gen
	}
	if !raft.IsEmptyHardState(hs) {
		// A new term or vote reaches the witness before raft may act on
		// it: a member that loses its HardState later is refused at open
		// instead of voting a second time in this term. Elections are
		// rare; the write path does not pay for this.
		if mustSync && s.sync {
			s.wmu.Lock()
			changed := !s.haveWitness || s.witnessed.Term != hs.GetTerm() || s.witnessed.Vote != hs.GetVote()
			s.wmu.Unlock()
			if changed {
				// The HardState itself is durable; failing the node
				// because the witness cannot be written (a full disk)
				// would be worse than a witness one term behind.
				if err := s.writeWitness(s.synced, s.syncedGen); err != nil {
					s.logf("cannot record term %d and vote in the durability witness %s: %v", hs.GetTerm(), s.witnessPath(), err)
				}
			}
		}
	}
	return nil
}

// Snapshot is raft.Storage's: what the leader sends a member that needs
// entries no longer in the log. Its metadata is normally the last
// compaction marker, whose ConfState is the configuration as of that
// index. A member added since is not in that ConfState, and raft refuses
// to restore a snapshot that does not list the member itself ("not in the
// ConfState"); the new member would wait, resent the same snapshot over
// and over, until the next compaction. So when the configuration applied
// since the marker differs, the metadata is that of the applied index
// instead. The transport streams the state as of when it sends, which is
// at least that new (and the receiver checks it).
func (s *Storage) Snapshot() (*raftpb.Snapshot, error) {
	snap, err := s.MemoryStorage.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() == 0 {
		return snap, err
	}
	view := s.db.NewSnapshot()
	defer view.Close()
	applied, err := AppliedIndex(view)
	if err != nil {
		return nil, err
	}
	cs, err := ConfState(view)
	if err != nil {
		return nil, err
	}
	if applied <= snap.GetMetadata().GetIndex() || cs.Equivalent(snap.GetMetadata().GetConfState()) == nil {
		return snap, nil
	}
	term, err := s.MemoryStorage.Term(applied)
	if err != nil {
		return snap, nil // the compaction marker is still a valid snapshot
	}
	return &raftpb.Snapshot{
		Data:     snap.GetData(),
		Metadata: &raftpb.SnapshotMetadata{Index: new(applied), Term: new(term), ConfState: cs},
	}, nil
}

// CompactLog records a compaction snapshot marker at snapIndex (which must
// be applied; cs is the ConfState as of it) and discards log entries up to
// and including compactTo (<= snapIndex); the entries in between stay for
// followers that are only slightly behind.
//
// The truncation is loosely coupled to the state's durability (as
// CockroachDB's raft log truncation is): the state is written to the
// memtables only (DisableWAL), so a raft log segment may go only once the
// state that covers it is in tables. CompactLog does not flush for that:
// it deletes the segments up to the newest compaction marker that is
// already durable (every earlier state write is then durable too: Pebble
// flushes memtables in order), and the rest goes at a later call, after
// Pebble has flushed a full memtable on its own. Forcing a flush at every
// compaction (every 10,000 entries, about a second under load) stalled
// the apply goroutine for the flush and filled L0 with small tables that
// each span the whole keyspace, which compactions then rewrote into the
// base level over and over. Only when the segments kept that way exceed
// lazyLogBytes does it flush, so the log stays bounded however slowly the
// memtable fills.
func (s *Storage) CompactLog(snapIndex, compactTo uint64, cs *raftpb.ConfState) error {
	return s.compactLog(snapIndex, compactTo, cs, false)
}

// compactLog is CompactLog; force flushes the state so that the log can be
// truncated at compactTo now (to give space back under a NOSPACE alarm).
func (s *Storage) compactLog(snapIndex, compactTo uint64, cs *raftpb.ConfState, force bool) error {
	// s.mu is held only around the in-memory steps: a flush takes as long
	// as writing a memtable, and must not hold up Save (the raft loop,
	// its heartbeats) meanwhile. MemoryStorage has a lock of its own.
	s.mu.Lock()
	snap, err := s.MemoryStorage.CreateSnapshot(snapIndex, cs, nil)
	s.mu.Unlock()
	if err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil
		}
		return err
	}
	data, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	// The raft log first: its HardState with a commit index at or above
	// snapIndex may have been appended without a sync. Then the marker,
	// which reaches the tables with the state up to snapIndex.
	if err := s.rlog.sync(); err != nil {
		s.logFailed(err) // never returns
	}
	if err := s.db.Set(keySnapMeta, data, pebble.NoSync); err != nil {
		return err
	}
	releaseTo := compactTo
	if !force {
		durable, err := s.durableSnapIndex()
		if err != nil {
			return err
		}
		if durable < compactTo && s.rlog.bytes() > lazyLogBytes(s.memTable) {
			force = true
		}
		releaseTo = min(compactTo, durable)
	}
	if force {
		if err := s.db.Flush(); err != nil {
			return fmt.Errorf("flush the state before compacting the raft log: %w", err)
		}
		releaseTo = compactTo
	}
	if err := s.rlog.releaseTo(releaseTo); err != nil {
		return err
	}
	if releaseTo == compactTo {
		s.dropMigrationBackup()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.MemoryStorage.Compact(compactTo); err != nil && !errors.Is(err, raft.ErrCompacted) {
		return err
	}
	return nil
}

// lazyLogBytes is how large the raft log may grow, waiting for the state
// it holds to be flushed by Pebble on its own, before CompactLog forces a
// flush: two memtables' worth (the log holds about what the memtables
// do), so that under a steady load a flush is almost never forced.
func lazyLogBytes(memTable uint64) uint64 { return 2 * memTable }

// durableSnapIndex is the index of the compaction marker in the tables,
// not counting what is only in the memtables: the marker a restart after
// a crash would load (0: none yet).
func (s *Storage) durableSnapIndex() (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{
		OnlyReadGuaranteedDurable: true,
		LowerBound:                keySnapMeta,
		UpperBound:                append(slices.Clip(keySnapMeta), 0),
	})
	if err != nil {
		return 0, err
	}
	var index uint64
	if it.First() {
		snap, err := decodeSnapMeta(it.Value())
		if err != nil {
			_ = it.Close()
			return 0, err
		}
		index = snap.GetMetadata().GetIndex()
	}
	return index, errors.Join(it.Error(), it.Close())
}

// decodeSnapMeta decodes the compaction marker's record (keySnapMeta).
func decodeSnapMeta(b []byte) (*raftpb.Snapshot, error) {
	snap := &raftpb.Snapshot{}
	if err := proto.Unmarshal(b, snap); err != nil {
		return nil, fmt.Errorf("decode snapshot metadata: %w", err)
	}
	return snap, nil
}

// AppliedIndex reads the applied index as of r's view.
func AppliedIndex(r pebble.Reader) (uint64, error) {
	b, ok, err := get(r, keyApplied)
	if err != nil || !ok {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

// SetAppliedIndex records index as applied, in the same batch as the state
// changes of that entry.
func SetAppliedIndex(b *pebble.Batch, index uint64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], index)
	return b.Set(keyApplied, v[:], nil)
}

// ConfState reads the applied ConfState as of r's view.
func ConfState(r pebble.Reader) (*raftpb.ConfState, error) {
	b, ok, err := get(r, keyConfState)
	if err != nil || !ok {
		return &raftpb.ConfState{}, err
	}
	cs := &raftpb.ConfState{}
	return cs, proto.Unmarshal(b, cs)
}

// SetConfState records the ConfState produced by applying a conf change.
func SetConfState(b *pebble.Batch, cs *raftpb.ConfState) error {
	data, err := proto.Marshal(cs)
	if err != nil {
		return err
	}
	return b.Set(keyConfState, data, nil)
}

// Meta reads a node-identity value (not replicated).
func (s *Storage) Meta(name string) ([]byte, bool, error) {
	return get(s.db, metaKey(name))
}

// SetMeta writes a node-identity value, durably (flushed: the state has
// no write-ahead log).
func (s *Storage) SetMeta(name string, value []byte) error {
	if err := s.db.Set(metaKey(name), value, pebble.NoSync); err != nil {
		return err
	}
	return s.db.Flush()
}

func metaKey(name string) []byte {
	return append(append([]byte{}, metaPrefix...), name...)
}

// Sync makes every raft log write so far durable. (The state is made
// durable by flushes: CompactLog, SetMeta, Close.)
func (s *Storage) Sync() error { return s.rlog.sync() }

func entryKey(index uint64) []byte {
	k := make([]byte, len(entryPrefix)+8)
	copy(k, entryPrefix)
	binary.BigEndian.PutUint64(k[len(entryPrefix):], index)
	return k
}

func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, true, nil
}
