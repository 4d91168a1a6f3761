package storage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/raft/v3"
)

// The durability witness is a small file beside Pebble's that records raft
// state known to be durable: the HardState and the last log entry as of a
// moment when everything before was synced. Pebble cannot tell a write-ahead
// log that lost synced records at its end (truncated, zeroed) from one torn
// by a crash, and replays both as a clean, shorter log. The witness can: a
// database that opens with less than its witness recorded lost data that
// was durable, and Open refuses it.
//
// It is written, with fsync and an atomic rename, by a background loop every
// WitnessInterval (recording the state as of the last synced raft log write,
// or syncing the WAL first when nothing was synced since), by
// Save whenever the term or vote changes (before raft may send the vote or
// act on the term, so a member can never vote twice in a term after losing
// its HardState), and by Close. No write on the client path waits for it.
const witnessFile = "durability-witness"

// DefaultWitnessInterval bounds how stale the witness may be.
const DefaultWitnessInterval = 100 * time.Millisecond

type witness struct {
	Term      uint64 `json:"term"`
	Vote      uint64 `json:"vote"`
	Commit    uint64 `json:"commit"`
	LastIndex uint64 `json:"last_index"`
	LastTerm  uint64 `json:"last_term"`
	// Clean is set by Close: nothing was written after it.
	Clean   bool      `json:"clean,omitempty"`
	Written time.Time `json:"written"`
}

func (w witness) sameState(o witness) bool {
	w.Written, o.Written = time.Time{}, time.Time{}
	return w == o
}

// empty: no raft state yet (a member waiting to join); nothing to witness.
func (w witness) empty() bool {
	return w.Term == 0 && w.Vote == 0 && w.Commit == 0 && w.LastIndex == 0 && w.LastTerm == 0
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// encode is one JSON line (readable by an operator) and its CRC-32C.
func (w witness) encode() []byte {
	js, _ := json.Marshal(w)
	return fmt.Appendf(nil, "%s\n%08x\n", js, crc32.Checksum(js, crcTable))
}

func decodeWitness(b []byte) (witness, error) {
	var w witness
	js, rest, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return w, errors.New("no checksum line")
	}
	var sum uint32
	if _, err := fmt.Sscanf(string(rest), "%08x\n", &sum); err != nil {
		return w, fmt.Errorf("checksum line: %v", err)
	}
	if got := crc32.Checksum(js, crcTable); got != sum {
		return w, fmt.Errorf("checksum %08x, file says %08x", got, sum)
	}
	if err := json.Unmarshal(js, &w); err != nil {
		return w, err
	}
	return w, nil
}

func (s *Storage) witnessPath() string { return s.fs.PathJoin(s.dir, witnessFile) }

// readWitness returns the stored witness; ok is false when there is none
// (a new data dir, or one written before witnesses existed).
func (s *Storage) readWitness() (w witness, ok bool, err error) {
	f, err := s.fs.Open(s.witnessPath())
	if errors.Is(err, os.ErrNotExist) {
		return w, false, nil
	}
	if err != nil {
		return w, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return w, false, err
	}
	if w, err = decodeWitness(b); err != nil {
		return w, false, errBadWitness{err}
	}
	return w, true, nil
}

// errBadWitness: the witness file exists but its content is damaged.
type errBadWitness struct{ err error }

func (e errBadWitness) Error() string { return e.err.Error() }

// captureLocked is the raft state Pebble holds now (s.mu held); once the
// WAL is synced it is durable.
func (s *Storage) captureLocked() witness {
	hs := s.hardState
	w := witness{Term: hs.GetTerm(), Vote: hs.GetVote(), Commit: hs.GetCommit(), LastIndex: s.lastIndex}
	if t, err := s.MemoryStorage.Term(s.lastIndex); err == nil {
		w.LastTerm = t
	}
	return w
}

// writeWitness replaces the witness file with w, durably. w must describe
// synced state; gen is when it was captured (s.gen), and a capture older
// than the witness on disk is not written (the witness never goes back,
// e.g. behind a term and vote Save recorded).
func (s *Storage) writeWitness(w witness, gen uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.haveWitness && (s.witnessed.sameState(w) || gen < s.witnessedGen) {
		return nil
	}
	w.Written = time.Now().UTC()
	tmp := s.witnessPath() + ".tmp"
	f, err := s.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(w.encode()); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := s.fs.Rename(tmp, s.witnessPath()); err != nil {
		return err
	}
	d, err := s.fs.OpenDir(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	s.witnessed, s.haveWitness, s.witnessedGen = w, true, gen
	return nil
}

// refreshWitness syncs the WAL and records what is then durable; clean
// marks the last witness before a clean close.
//
// Under load the raft log's own synced writes keep s.synced fresh, and it
// is recorded without another WAL sync (which would queue in Pebble's
// commit pipeline ahead of the raft loop's next sync). Only when nothing
// was synced since the last witness but the state moved on (a commit
// index advanced by an unsynced write, an installed snapshot) or at Close
// does it sync the WAL and record the state as of now.
func (s *Storage) refreshWitness(clean bool) error {
	if !clean {
		s.mu.Lock()
		synced, gen := s.synced, s.syncedGen
		s.mu.Unlock()
		s.wmu.Lock()
		fresh := gen > s.witnessedGen && !(s.haveWitness && s.witnessed.sameState(synced))
		s.wmu.Unlock()
		if fresh && !synced.empty() {
			return s.writeWitness(synced, gen)
		}
	}
	s.mu.Lock()
	w := s.captureLocked()
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	w.Clean = clean
	s.wmu.Lock()
	same := s.haveWitness && s.witnessed.sameState(w)
	s.wmu.Unlock()
	if same || w.empty() {
		return nil
	}
	if err := s.Sync(); err != nil {
		return err
	}
	s.mu.Lock()
	if gen > s.syncedGen {
		s.synced, s.syncedGen = w, gen
		s.synced.Clean = false
	}
	s.mu.Unlock()
	return s.writeWitness(w, gen)
}

// kickWitness tells the witness loop that the raft state may have moved
// on (s.mu need not be held).
func (s *Storage) kickWitness() {
	select {
	case s.witnessKick <- struct{}{}:
	default:
	}
}

// witnessLoop refreshes the witness after the raft state moved on, at
// most once per every: a change is recorded within every of when it was
// made, as with a ticker, but an idle member does not wake up. A failed
// refresh is retried every interval until one succeeds.
func (s *Storage) witnessLoop(every time.Duration) {
	defer close(s.witnessDone)
	t := time.NewTimer(every)
	defer t.Stop()
	last := time.Now()
	failing := false
	for {
		select {
		case <-s.witnessStop:
			return
		case <-s.witnessKick:
		}
		if wait := every - time.Since(last); wait > 0 {
			t.Reset(wait)
			select {
			case <-s.witnessStop:
				return
			case <-t.C:
			}
		}
		last = time.Now()
		if s.damage.Load() != nil {
			continue // the node is stopping; vouch for nothing more
		}
		err := s.refreshWitness(false)
		switch {
		case err != nil && !failing:
			// Once per failure spell, not once per tick.
			s.logf("cannot update the durability witness %s (loss of recent writes after a crash would go undetected until it works again): %v", s.witnessPath(), err)
			failing = true
		case err == nil && failing:
			s.logf("durability witness %s is being updated again", s.witnessPath())
			failing = false
		}
		if err != nil {
			s.kickWitness()
		}
	}
}

// checkWitness compares the recovered raft state with the witness. Loss of
// anything the witness saw durable is refused; entries after it that did
// not survive are reported.
func (s *Storage) checkWitness(newestWAL string) error {
	w, ok, err := s.readWitness()
	var bad errBadWitness
	if errors.As(err, &bad) {
		return &DamageError{Dir: s.dir, File: s.witnessPath(),
			Problem: fmt.Sprintf("the durability witness is damaged: %v", err)}
	}
	if err != nil {
		return fmt.Errorf("read the durability witness: %w", err)
	}
	if !ok {
		return nil
	}
	s.witnessed, s.haveWitness = w, true
	hs, _, _ := s.MemoryStorage.InitialState()
	last := s.lastIndex
	damage := func(problem string) error {
		return &DamageError{Dir: s.dir, File: newestWAL, Problem: problem, LastGood: last, Witness: &w}
	}
	switch {
	case raft.IsEmptyHardState(hs) && last == 0 && !w.empty():
		return damage("the raft log and HardState are gone")
	case hs.GetTerm() < w.Term:
		return damage(fmt.Sprintf("the HardState term went back from %d to %d", w.Term, hs.GetTerm()))
	case hs.GetTerm() == w.Term && w.Vote != 0 && hs.GetVote() != w.Vote:
		return damage(fmt.Sprintf("the vote of term %d was lost (was %x, now %x)", w.Term, w.Vote, hs.GetVote()))
	case hs.GetCommit() < w.Commit:
		return damage(fmt.Sprintf("the commit index went back from %d to %d", w.Commit, hs.GetCommit()))
	case last < w.Commit:
		return damage(fmt.Sprintf("committed raft entries %d..%d are missing", last+1, w.Commit))
	}
	if !w.Clean && (w.LastIndex > 0 || last > 0) {
		s.log.Info(fmt.Sprintf("recovering from an unclean shutdown: raft log recovered to index %d (commit %d), the durability witness of %s saw index %d (commit %d); writes synced after it and missing now would be a torn tail (not detectable)",
			last, hs.GetCommit(), w.Written.Format(time.RFC3339Nano), w.LastIndex, w.Commit), "component", "storage")
	}
	if w.LastIndex == 0 {
		return nil
	}
	term, err := s.MemoryStorage.Term(w.LastIndex)
	if errors.Is(err, raft.ErrCompacted) || (err == nil && term == w.LastTerm) {
		return nil // still there, or applied and compacted away
	}
	// Entry (LastIndex, LastTerm) was durable and is gone. Only a leader
	// of a later term may replace it (raft never overwrites an entry with
	// one of its own term), and its term is persisted with the change.
	if hs.GetTerm() <= w.LastTerm {
		return damage(fmt.Sprintf("synced raft entries %d..%d (term %d) are missing", last+1, w.LastIndex, w.LastTerm))
	}
	if last < w.LastIndex {
		s.logf("raft log recovered to index %d, %d entries short of the durability witness of %s: uncommitted entries replaced by a leader of term %d, or a torn tail that was never committed",
			last, w.LastIndex-last, w.Written.Format(time.RFC3339Nano), hs.GetTerm())
	}
	return nil
}

// DamageError reports data that was durable and is now damaged or missing.
// A node must not serve or vote with such data.
type DamageError struct {
	Dir     string
	File    string // the damaged file, or the newest WAL when loss is detected; may be ""
	Problem string
	// LastGood is the last raft index recovered intact (0 when unknown).
	LastGood uint64
	Witness  *witness
}

// ErrDamaged matches every *DamageError (errors.Is). It is
// dkverr.ErrDamaged, which the CLI maps to its DataDamaged exit code.
var ErrDamaged = dkverr.ErrDamaged

func (e *DamageError) Is(target error) bool { return target == ErrDamaged }

func (e *DamageError) Error() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "data dir %s is damaged: %s", e.Dir, e.Problem)
	if e.File != "" {
		fmt.Fprintf(&b, "; file %s", e.File)
	}
	if e.LastGood > 0 {
		fmt.Fprintf(&b, "; last good raft index %d", e.LastGood)
	}
	if w := e.Witness; w != nil {
		fmt.Fprintf(&b, "; durable as of %s (%s): term %d, vote %x, commit %d, last raft index %d (term %d)",
			w.Written.Format(time.RFC3339), witnessFile, w.Term, w.Vote, w.Commit, w.LastIndex, w.LastTerm)
	}
	b.WriteString(". Do not restart this member with this data: remove it from the cluster and add it back with an empty data dir, or restore the data dir from a backup (docs/cluster.md, \"Damaged data\")")
	return b.String()
}

// reportTornTail reads the newest WAL before Pebble replays it and logs a
// tail that holds no complete record: Pebble drops it silently. Damage with
// synced records after it is left to Pebble, which refuses it.
func (s *Storage) reportTornTail(path string) {
	if path == "" {
		return
	}
	logs, err := wal.Scan(wal.Dir{FS: s.fs, Dirname: s.dir})
	if err != nil || len(logs) == 0 {
		return
	}
	ll := logs[len(logs)-1]
	if _, p := ll.SegmentLocation(ll.NumSegments() - 1); p != path {
		return
	}
	size, err := ll.PhysicalSize()
	if err != nil {
		return
	}
	r := ll.OpenForRead()
	defer r.Close()
	records := 0
	for {
		rr, off, err := r.NextRecord()
		if err == nil {
			_, err = io.Copy(io.Discard, rr)
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			if errors.Is(err, record.ErrUnexpectedEOF) && int64(size) > off.Physical {
				s.logf("write-ahead log %s ends in a torn tail: its last %d of %d bytes (after %d complete records) hold no complete record and are dropped on replay; they were not synced before the crash, or were synced after the last durability witness",
					path, int64(size)-off.Physical, size, records)
			}
			return
		}
		records++
	}
}
