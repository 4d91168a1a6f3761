package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The raft log lives outside Pebble (storage format 2), in segment files
// under <data dir>/raftlog: raft entries are appended once, synced once
// per Ready, and dropped by deleting whole segments, with nothing flushed
// or compacted for them (docs/design/storage-v2.md, step 1).
//
// The records are written with Pebble's record.LogWriter, the writer of
// Pebble's own write-ahead log: 32 KiB blocks, a CRC per chunk, and in
// each chunk the offset the log was last synced to, so that a damaged
// record followed by proof of a later sync is reported as damage rather
// than taken for a torn tail. It writes through the same vfs.FS as the
// rest of the store: the ENOSPC wrapper that releases the ballast, the
// tests' in-memory and fault-injecting filesystems.
//
// A segment is named <seq>-<first>.rlog (hex): seq orders segments, first
// is the index the log's next entry had when the segment was cut. Each
// record is one Save: the HardState, if any, and the entries, which
// replace every entry at or above the first one's index (raft's append
// contract). A segment starts with the HardState of the moment it was
// cut, so it stands alone once the segments before it are deleted. A
// reset record (an installed raft snapshot) drops every entry before it.

// DefaultSegmentBytes is the size at which the raft log moves to a new
// segment (Options.SegmentBytes). Small enough that an idle member stays
// small; large enough that cutting (a file create and a directory sync)
// is rare.
const DefaultSegmentBytes = 4 << 20

const (
	raftLogDir   = "raftlog"
	segmentExt   = ".rlog"
	recKindSave  = 1
	recKindReset = 2
)

type segment struct {
	seq, first uint64
}

func (g segment) name() string { return fmt.Sprintf("%016x-%016x%s", g.seq, g.first, segmentExt) }

func parseSegment(name string) (segment, bool) {
	base, ok := strings.CutSuffix(name, segmentExt)
	if !ok {
		return segment{}, false
	}
	a, b, ok := strings.Cut(base, "-")
	if !ok || len(a) != 16 || len(b) != 16 {
		return segment{}, false
	}
	seq, err1 := strconv.ParseUint(a, 16, 64)
	first, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return segment{}, false
	}
	return segment{seq: seq, first: first}, true
}

// raftLog appends records to the newest segment. Its methods are
// serialized by mu.
type raftLog struct {
	fs       vfs.FS
	dir      string
	noSync   bool
	segBytes int64

	mu   sync.Mutex
	segs []segment // oldest first; the last is being written
	f    vfs.File
	w    *record.LogWriter
	sem  chan struct{}
	buf  []byte
	err  error // a failed write: the log cannot be used any more
}

// logContents is what a log replays to.
type logContents struct {
	hs    *raftpb.HardState
	ents  []*raftpb.Entry
	reset *raftpb.SnapshotMetadata // the newest reset record, if any
	// torn names a segment that ended in an incomplete record (a write
	// cut short by a crash), and how many bytes were dropped.
	torn      string
	tornBytes int64
}

// logDamage is a raft log segment found damaged while reading.
type segmentDamage struct {
	file     string
	problem  string
	lastGood uint64
}

func (e *segmentDamage) Error() string { return e.file + ": " + e.problem }

func listSegments(fs vfs.FS, dir string) ([]segment, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for _, n := range names {
		if g, ok := parseSegment(n); ok {
			segs = append(segs, g)
		}
	}
	slices.SortFunc(segs, func(a, b segment) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	return segs, nil
}

// readLog replays every segment in dir.
func readLog(fs vfs.FS, dir string) ([]segment, *logContents, error) {
	segs, err := listSegments(fs, dir)
	if err != nil {
		return nil, nil, err
	}
	c := &logContents{}
	for _, g := range segs {
		if err := c.readSegment(fs, fs.PathJoin(dir, g.name())); err != nil {
			return nil, nil, err
		}
	}
	return segs, c, nil
}

func (c *logContents) readSegment(fs vfs.FS, path string) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	size := int64(-1)
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	r := record.NewReader(f, 0)
	for {
		rr, err := r.Next()
		var data []byte
		if err == nil {
			data, err = io.ReadAll(rr)
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, record.ErrUnexpectedEOF):
			// Nothing after it proves a later sync: the tail of a write
			// that a crash cut short. What it held was not acknowledged
			// unless the durability witness says so (checkWitness).
			c.torn = path
			if size >= 0 {
				c.tornBytes = size - r.Offset()
			}
			return nil
		case err != nil:
			return &segmentDamage{file: path, lastGood: c.last(), problem: fmt.Sprintf("a record at byte %d fails its checksum, with synced records after it: %v", r.Offset(), err)}
		}
		if err := c.apply(data); err != nil {
			var h errHole
			if errors.As(err, &h) {
				return &segmentDamage{file: path, lastGood: h.last, problem: fmt.Sprintf("the raft log has a hole: entries %d to %d are missing", h.last+1, h.next-1)}
			}
			return &segmentDamage{file: path, lastGood: c.last(), problem: fmt.Sprintf("record at byte %d: %v", r.Offset(), err)}
		}
	}
}

// apply replays one record.
func (c *logContents) apply(data []byte) error {
	if len(data) == 0 {
		return nil // a sync marker
	}
	kind, data := data[0], data[1:]
	switch kind {
	case recKindReset:
		m := &raftpb.SnapshotMetadata{}
		if err := proto.Unmarshal(data, m); err != nil {
			return fmt.Errorf("decode reset: %w", err)
		}
		c.reset, c.ents = m, nil
		return nil
	case recKindSave:
	default:
		return fmt.Errorf("unknown record kind %d", kind)
	}
	hsb, data, err := chunk(data)
	if err != nil {
		return err
	}
	if len(hsb) > 0 {
		hs := &raftpb.HardState{}
		if err := proto.Unmarshal(hsb, hs); err != nil {
			return fmt.Errorf("decode hard state: %w", err)
		}
		c.hs = hs
	}
	for len(data) > 0 {
		var eb []byte
		if eb, data, err = chunk(data); err != nil {
			return err
		}
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(eb, e); err != nil {
			return fmt.Errorf("decode entry: %w", err)
		}
		i := e.GetIndex()
		if n := len(c.ents); n > 0 {
			first := c.ents[0].GetIndex()
			switch {
			case i <= first:
				c.ents = c.ents[:0]
			case i <= first+uint64(n)-1:
				c.ents = c.ents[:i-first] // raft replaced the tail
			case i > first+uint64(n):
				return errHole{last: first + uint64(n) - 1, next: i}
			}
		}
		c.ents = append(c.ents, e)
	}
	return nil
}

// errHole: entry next follows entry last in the log.
type errHole struct{ last, next uint64 }

func (e errHole) Error() string { return fmt.Sprintf("entry %d follows entry %d", e.next, e.last) }

// last is the index of the last entry replayed so far (0: none).
func (c *logContents) last() uint64 {
	if n := len(c.ents); n > 0 {
		return c.ents[n-1].GetIndex()
	}
	return 0
}

func chunk(b []byte) ([]byte, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, errors.New("record cut short")
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// openLogForAppend starts a new segment after segs, whose entries begin
// at next, beginning with hs. A log is never appended to after a restart:
// the last segment may end in a torn record.
func openLogForAppend(fs vfs.FS, dir string, segs []segment, next uint64, hs *raftpb.HardState, noSync bool, segBytes int64) (*raftLog, error) {
	l := &raftLog{fs: fs, dir: dir, noSync: noSync, segBytes: segBytes, segs: segs, sem: make(chan struct{}, 1)}
	if err := l.cut(next, hs, nil); err != nil {
		return nil, err
	}
	return l, nil
}

// cut closes the current segment (syncing it) and starts the next, whose
// first record holds hs and, for a reset, the snapshot's metadata.
func (l *raftLog) cut(next uint64, hs *raftpb.HardState, reset *raftpb.SnapshotMetadata) error {
	if l.w != nil {
		if err := l.w.Close(); err != nil {
			return l.fail(fmt.Errorf("close raft log segment: %w", err))
		}
		l.w, l.f = nil, nil
	}
	seq := uint64(1)
	if n := len(l.segs); n > 0 {
		seq = l.segs[n-1].seq + 1
	}
	g := segment{seq: seq, first: next}
	f, err := l.fs.Create(l.fs.PathJoin(l.dir, g.name()), vfs.WriteCategoryUnspecified)
	if err != nil {
		return l.fail(fmt.Errorf("create raft log segment: %w", err))
	}
	if err := syncDir(l.fs, l.dir); err != nil {
		f.Close()
		return l.fail(err)
	}
	l.f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{PreallocateSize: 512 << 10})
	l.w = record.NewLogWriter(l.f, 0, record.LogWriterConfig{
		QueueSemChan:        l.sem,
		WriteWALSyncOffsets: func() bool { return true },
	})
	l.segs = append(l.segs, g)
	if reset != nil {
		b, err := proto.Marshal(reset)
		if err != nil {
			return err
		}
		if err := l.write(append([]byte{recKindReset}, b...), false); err != nil {
			return err
		}
	}
	return l.write(l.encode(hs, nil), reset != nil)
}

func (l *raftLog) fail(err error) error {
	if l.err == nil {
		l.err = err
	}
	return err
}

// encode is a save record: the HardState (empty if none) and the entries.
func (l *raftLog) encode(hs *raftpb.HardState, ents []*raftpb.Entry) []byte {
	b := append(l.buf[:0], recKindSave)
	opts := proto.MarshalOptions{UseCachedSize: true}
	add := func(m proto.Message) {
		size := proto.Size(m)
		b = binary.AppendUvarint(b, uint64(size))
		b, _ = opts.MarshalAppend(b, m)
	}
	if hs != nil && (hs.GetTerm() != 0 || hs.GetVote() != 0 || hs.GetCommit() != 0) {
		add(hs)
	} else {
		b = append(b, 0)
	}
	for _, e := range ents {
		add(e)
	}
	l.buf = b
	return b
}

// write appends one record and, when wait, waits until it is durable.
func (l *raftLog) write(rec []byte, wait bool) error {
	if l.err != nil {
		return l.err
	}
	if !wait || l.noSync {
		if _, err := l.w.WriteRecord(rec); err != nil {
			return l.fail(fmt.Errorf("append to the raft log: %w", err))
		}
		return nil
	}
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	l.sem <- struct{}{}
	if _, err := l.w.SyncRecord(rec, &wg, &serr); err != nil {
		// SyncRecord failed before queueing: release the slot.
		<-l.sem
		return l.fail(fmt.Errorf("append to the raft log: %w", err))
	}
	wg.Wait()
	if serr != nil {
		return l.fail(fmt.Errorf("sync the raft log: %w", serr))
	}
	return nil
}

// save appends a Ready's HardState and entries; next is the index after
// the last entry the log then holds, for a cut.
func (l *raftLog) save(hs *raftpb.HardState, ents []*raftpb.Entry, wait bool, next uint64, curHS *raftpb.HardState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.write(l.encode(hs, ents), wait); err != nil {
		return err
	}
	if l.w.Size() >= l.segBytes {
		return l.cut(next, curHS, nil)
	}
	return nil
}

// sync makes every record so far durable.
func (l *raftLog) sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.write(nil, true)
}

// reset starts a segment with a reset record for an installed snapshot
// (synced) and deletes every segment before it.
func (l *raftLog) reset(meta *raftpb.SnapshotMetadata, hs *raftpb.HardState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.cut(meta.GetIndex()+1, hs, meta); err != nil {
		return err
	}
	return l.removeLocked(len(l.segs) - 1)
}

// rotate starts a new segment at next, synced, unless the newest one
// already starts there: with every entry below next applied and durable
// in the state, releaseTo can then delete all the others, the one that
// was being written included.
func (l *raftLog) rotate(next uint64, hs *raftpb.HardState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.segs); n > 0 && l.segs[n-1].first == next {
		return nil
	}
	if err := l.cut(next, hs, nil); err != nil {
		return err
	}
	return l.write(nil, true)
}

// releaseTo deletes the segments whose entries are all at or below index
// (applied, and durable in the state): those before a segment whose first
// entry is at most index+1. The newest segment always stays.
func (l *raftLog) releaseTo(index uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := len(l.segs) - 1
	for keep > 0 && l.segs[keep].first > index+1 {
		keep--
	}
	return l.removeLocked(keep)
}

// removeLocked deletes segments [0, n).
func (l *raftLog) removeLocked(n int) error {
	if n <= 0 {
		return nil
	}
	for _, g := range l.segs[:n] {
		if err := l.fs.Remove(l.fs.PathJoin(l.dir, g.name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove raft log segment: %w", err)
		}
	}
	l.segs = append(l.segs[:0], l.segs[n:]...)
	return syncDir(l.fs, l.dir)
}

// logFailed handles a raft log write or sync that failed (at ENOSPC once
// the ballast is gone, say). As with a failed write of Pebble's own WAL,
// the node cannot go on: whether the failed records reached the disk is
// unknown, and a sync must not be retried ("fsyncgate"). It is reported
// once through Options.Fatal and the calling goroutine (the raft loop) is
// parked for good, so nothing carries on as if the write had succeeded;
// the owner stops the process. What was acknowledged was synced before.
func (s *Storage) logFailed(err error) {
	s.pl.fatal(&FatalError{Msg: "raft log: " + err.Error()})
}

// LogBytes is what the raft log's segment files take on disk.
func (s *Storage) LogBytes() uint64 {
	if s.rlog == nil {
		return 0
	}
	return s.rlog.bytes()
}

// bytes is what the log's segments take on disk.
func (l *raftLog) bytes() uint64 {
	l.mu.Lock()
	segs := slices.Clone(l.segs)
	l.mu.Unlock()
	var n uint64
	for _, g := range segs {
		if fi, err := l.fs.Stat(l.fs.PathJoin(l.dir, g.name())); err == nil {
			n += uint64(fi.Size())
		}
	}
	return n
}

func (l *raftLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return nil
	}
	err := l.w.Close()
	l.w, l.f = nil, nil
	return err
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
