package storage

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// crash stops s the way kill -9 would leave it: Pebble's files as they are,
// no final witness, no flush.
func crash(t *testing.T, s *Storage) {
	t.Helper()
	close(s.witnessStop)
	<-s.witnessDone
	s.closeOnce.Do(func() {})
	// The raft log's writer is left as it is (its synced records are on
	// disk; nothing more is flushed).
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeAcked saves n entries one synced Ready at a time, each committing the
// one before, as a single node does, and refreshes the witness as its loop
// would.
func writeAcked(t *testing.T, s *Storage, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		hs := &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(i - 1)}
		e := &raftpb.Entry{Index: new(i), Term: new(uint64(2)), Data: []byte(strings.Repeat("v", 200))}
		if err := s.Save(hs, []*raftpb.Entry{e}, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.refreshWitness(false); err != nil {
		t.Fatal(err)
	}
}

// newestWALFile is the raft log's newest segment.
func newestWALFile(t *testing.T, dir string) string {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, raftLogDir, "*"+segmentExt))
	if len(logs) == 0 {
		t.Fatal("no raft log segment in", dir)
	}
	sort.Strings(logs)
	return logs[len(logs)-1]
}

// crashedWith is a data dir holding acknowledged entries 1..n of a store
// that then crashed (no clean close).
func crashedWith(t *testing.T, n uint64) string {
	t.Helper()
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, n)
	crash(t, s)
	return dir
}

func openNoWitnessLoop(t *testing.T, dir string) (*Storage, error) {
	t.Helper()
	return Open(dir, Options{WitnessInterval: time.Hour})
}

func wantDamage(t *testing.T, err error, file string, lastGood uint64) *DamageError {
	t.Helper()
	var de *DamageError
	if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("open of damaged data: err = %v, want a *DamageError", err)
	}
	if file != "" && de.File != file {
		t.Errorf("damage names file %q, want %q", de.File, file)
	}
	if lastGood != 0 && de.LastGood > lastGood {
		t.Errorf("last good index %d, want <= %d", de.LastGood, lastGood)
	}
	msg := err.Error()
	for _, want := range []string{"is damaged", "remove it from the cluster", "restore the data dir from a backup"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	return de
}

// A WAL cut to half its length after a crash replays as a shorter, clean
// log; the witness shows that synced, committed entries are gone, and Open
// refuses the store instead of serving the loss.
func TestTruncatedWALIsRefused(t *testing.T) {
	dir := crashedWith(t, 500)
	wal := newestWALFile(t, dir)
	fi, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(wal, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	_, err = openNoWitnessLoop(t, dir)
	de := wantDamage(t, err, wal, 499)
	if de.LastGood == 0 || de.Witness == nil || de.Witness.Commit != 499 {
		t.Errorf("damage %+v: want the recovered last index and a witness at commit 499", de)
	}
	t.Log(err)
}

// Eight flipped bytes in the middle of the newest WAL, with synced records
// after them, are corruption (not a torn tail): Open names the WAL.
func TestFlippedWALBytesAreRefused(t *testing.T) {
	dir := crashedWith(t, 500)
	wal := newestWALFile(t, dir)
	flipMiddle(t, wal)
	_, err := openNoWitnessLoop(t, dir)
	wantDamage(t, err, wal, 0)
	t.Log(err)
}

func flipMiddle(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mid := len(b) / 2
	for i := mid; i < mid+8 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A member whose WAL lost its HardState (and log) entirely must not come
// back as an empty node that could vote again in a term it voted in: the
// vote was in the witness before Save returned.
func TestLostHardStateIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	// A vote, synced, with no witness refresh but Save's own.
	hs := &raftpb.HardState{Term: new(uint64(7)), Vote: new(uint64(3))}
	if err := s.Save(hs, nil, true); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	wal := newestWALFile(t, dir)
	if err := os.Truncate(wal, 0); err != nil {
		t.Fatal(err)
	}
	_, err = openNoWitnessLoop(t, dir)
	wantDamage(t, err, wal, 0)
	t.Log(err)
}

// A damaged SST (bytes flipped in its middle) is a clean *DamageError that
// names the file, not a panic.
func TestFlippedSSTBytesAreRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 1000)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no sst after flush")
	}
	for _, f := range ssts {
		flipMiddle(t, f)
	}
	_, err = openNoWitnessLoop(t, dir)
	de := wantDamage(t, err, "", 0)
	if !strings.HasSuffix(de.File, ".sst") {
		t.Errorf("damage names %q, want the .sst", de.File)
	}
	t.Log(err)
}

// Losing only what was written after the last witness (a torn tail) is
// accepted: the store opens with everything the witness saw.
func TestTornTailAfterWitnessOpens(t *testing.T) {
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 100)
	// Written after the witness: the crash may tear these.
	for i := uint64(101); i <= 110; i++ {
		e := &raftpb.Entry{Index: new(i), Term: new(uint64(2)), Data: []byte(strings.Repeat("v", 200))}
		if err := s.Save(nil, []*raftpb.Entry{e}, true); err != nil {
			t.Fatal(err)
		}
	}
	crash(t, s)
	wal := newestWALFile(t, dir)
	fi, _ := os.Stat(wal)
	if err := os.Truncate(wal, fi.Size()-100); err != nil {
		t.Fatal(err)
	}
	s, err = openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatalf("torn tail after the witness refused: %v", err)
	}
	defer s.Close()
	last, _ := s.LastIndex()
	if last < 100 || last >= 110 {
		t.Fatalf("last index %d, want in [100, 110)", last)
	}
}

// An undamaged restart after a crash keeps every entry, and a clean close
// leaves a witness that the next open accepts.
func TestCrashAndCleanRestartKeepEverything(t *testing.T) {
	dir := crashedWith(t, 300)
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := s.LastIndex(); last != 300 {
		t.Fatalf("last index %d after crash, want 300", last)
	}
	writeAcked(t, s, 301, 310)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, _ := s.LastIndex(); last != 310 {
		t.Fatalf("last index %d after clean restart, want 310", last)
	}
}

// A leader of a later term may replace uncommitted entries the witness saw;
// that is not damage.
func TestEntriesReplacedByLaterLeaderAreNotDamage(t *testing.T) {
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 20) // term 2, commit 19, last 20
	hs := &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(9)), Commit: new(uint64(19))}
	e := &raftpb.Entry{Index: new(uint64(20)), Term: new(uint64(3))}
	if err := s.Save(hs, []*raftpb.Entry{e}, true); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	s, err = openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatalf("open after a leader replaced an entry: %v", err)
	}
	s.Close()
}

// Corruption Pebble finds while the store is open (an SST block failing its
// checksum on a read) is reported once through OnDamage as a *DamageError
// naming the file, and the read fails: no panic, no wrong data.
func TestCorruptionWhileRunningIsReported(t *testing.T) {
	dir := t.TempDir()
	reported := make(chan error, 4)
	s, err := Open(dir, Options{WitnessInterval: time.Hour, OnDamage: func(err error) { reported <- err }})
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 1000)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no sst after flush")
	}
	for _, f := range ssts {
		flipMiddle(t, f)
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	iterErr := it.Error()
	it.Close()
	if iterErr == nil {
		t.Fatalf("read %d keys of a damaged SST without an error", n)
	}
	select {
	case err := <-reported:
		de := wantDamage(t, err, "", 0)
		if !strings.HasSuffix(de.File, ".sst") {
			t.Errorf("damage names %q, want the .sst", de.File)
		}
	default:
		t.Fatalf("read failed (%v) but OnDamage was not called", iterErr)
	}
	if s.Damage() == nil {
		t.Error("Damage() is nil after a reported corruption")
	}
	s.Close()
}

// BenchmarkSaveSyncedWitnessOff is BenchmarkSaveSynced with the witness
// loop all but off, to see what the loop costs the write path.
func BenchmarkSaveSyncedWitnessOff(b *testing.B) {
	benchSave(b, Options{WitnessInterval: time.Hour})
}

// BenchmarkSaveSyncedWitness10ms refreshes the witness ten times as often
// as the default.
func BenchmarkSaveSyncedWitness10ms(b *testing.B) {
	benchSave(b, Options{WitnessInterval: 10 * time.Millisecond})
}

// A store that never held raft state (a member waiting to join) closes and
// reopens without a witness claiming anything.
func TestEmptyStoreReopens(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		s, err := openNoWitnessLoop(t, dir)
		if err != nil {
			t.Fatalf("open %d of an empty store: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A torn tail is reported in the log with how much was dropped.
func TestTornTailIsLogged(t *testing.T) {
	dir := crashedWith(t, 50)
	wal := newestWALFile(t, dir)
	fi, _ := os.Stat(wal)
	if err := os.Truncate(wal, fi.Size()-20); err != nil {
		t.Fatal(err)
	}
	var logb strings.Builder
	s, err := Open(dir, Options{WitnessInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logb}, nil))})
	if err == nil {
		s.Close()
	}
	if !strings.Contains(logb.String(), "ends in a torn tail") || !strings.Contains(logb.String(), filepath.Base(wal)) {
		t.Errorf("log does not report the torn tail of %s:\n%s", wal, logb.String())
	}
	t.Log(logb.String())
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A damaged witness file is itself damage: Open names it.
func TestDamagedWitnessIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 10)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, witnessFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[5] ^= 0x01
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = openNoWitnessLoop(t, dir)
	wantDamage(t, err, p, 0)
}

// The witness goes through Options.FS like Pebble's files.
func TestWitnessOnMemFS(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("d", 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open("d", Options{FS: fs, WitnessInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(fs.PathJoin("d", witnessFile)); err != nil {
		t.Fatalf("no witness on the FS: %v", err)
	}
	s, err = Open("d", Options{FS: fs, WitnessInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// A database whose files are gone (or opened at a version from before its
// first records) while the raft log survives is damage, not a new store:
// it would start with no identity over a log that has one.
func TestLostDatabaseWithRaftLogIsRefused(t *testing.T) {
	dir := crashedWith(t, 20)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == witnessFile {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	_, err = openNoWitnessLoop(t, dir)
	de := wantDamage(t, err, "", 0)
	if !strings.Contains(de.Problem, "the database has lost its records") {
		t.Fatalf("damage %q does not say the database lost its records", de.Problem)
	}
}

// A commit index saved without a sync (raft asks for none when only the
// commit moves) may be lost in a crash while a compaction marker above it
// was synced. Raft refuses to start with a commit index below its
// snapshot ("state.commit 3125 is out of range [3334, 3334]", found by
// TestProcessKill9UnderWrites); Open gives it at least the snapshot's.
func TestCommitBelowSnapshotAfterCrashStarts(t *testing.T) {
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 20) // commit 19, synced
	// The marker at 20 reaches the disk; the HardState with commit 20
	// never did.
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(20)), Term: new(uint64(2)),
		ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}
	b, err := proto.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(keySnapMeta, b, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	s, err = openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs, _, _ := s.InitialState()
	if first, _ := s.FirstIndex(); hs.GetCommit() < first-1 {
		t.Fatalf("commit %d below the snapshot at %d: raft would refuse to start", hs.GetCommit(), first-1)
	}
	rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: s, MaxInflightMsgs: 16, Applied: 20})
	if err != nil || rn == nil {
		t.Fatalf("raft on the reopened store: %v", err)
	}
}

// A refused open writes nothing: the damaged data dir is left as it was
// found for whoever examines or restores it (it used to gain a raft log
// segment at each failed start).
func TestRefusedOpenLeavesTheRaftLogAlone(t *testing.T) {
	dir := crashedWith(t, 100)
	wal := newestWALFile(t, dir)
	truncateHalfFile(t, wal)
	before, _ := filepath.Glob(filepath.Join(dir, raftLogDir, "*"))
	for range 3 {
		_, err := openNoWitnessLoop(t, dir)
		wantDamage(t, err, "", 0)
	}
	after, _ := filepath.Glob(filepath.Join(dir, raftLogDir, "*"))
	if len(after) != len(before) {
		t.Fatalf("refused opens changed the raft log: %v, then %v", before, after)
	}
}

func truncateHalfFile(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}
