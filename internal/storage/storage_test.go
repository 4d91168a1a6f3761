package storage

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

func ents(lo, hi, term uint64) []*raftpb.Entry {
	var out []*raftpb.Entry
	for i := lo; i <= hi; i++ {
		out = append(out, &raftpb.Entry{Index: new(i), Term: new(term), Data: []byte{byte(i)}})
	}
	return out
}

// setApplied records index and cs as applied, as the state machine does.
func setApplied(t *testing.T, s *Storage, index uint64, cs *raftpb.ConfState) {
	t.Helper()
	b := s.DB().NewBatch()
	defer b.Close()
	if err := SetAppliedIndex(b, index); err != nil {
		t.Fatal(err)
	}
	if err := SetConfState(b, cs); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, dir string) *Storage {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A reopened store serves the same log and HardState to raft, and a
// conflicting append replaces the tail, as raft's contract requires.
func TestLogSurvivesReopenAndTailIsReplaced(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if s.HasRaftState() {
		t.Fatal("fresh store claims raft state")
	}
	hs := &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(uint64(3))}
	if err := s.Save(hs, ents(1, 5, 1), true); err != nil {
		t.Fatal(err)
	}
	// A new leader overwrites 4..5 with a different term and appends 6.
	if err := s.Save(nil, ents(4, 6, 2), true); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dir)
	defer s.Close()
	if !s.HasRaftState() {
		t.Fatal("reopened store lost its raft state")
	}
	gotHS, _, err := s.InitialState()
	if err != nil || gotHS.GetTerm() != 2 || gotHS.GetCommit() != 3 {
		t.Fatalf("hard state %v, %v", gotHS, err)
	}
	last, _ := s.LastIndex()
	if last != 6 {
		t.Fatalf("last index %d, want 6", last)
	}
	for i, want := range map[uint64]uint64{3: 1, 4: 2, 6: 2} {
		if term, err := s.Term(i); err != nil || term != want {
			t.Fatalf("term(%d) = %d, %v; want %d", i, term, err, want)
		}
	}
}

// Compaction keeps the entries after compactTo, records the snapshot
// marker, and both survive a reopen; ConfState comes from the applied
// state, which is what raft restarts from.
func TestCompactLogAndAppliedConfState(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(10))}, ents(1, 10, 1), true); err != nil {
		t.Fatal(err)
	}
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	setApplied(t, s, 10, cs)
	if err := s.CompactLog(10, 7, cs); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dir)
	defer s.Close()
	first, _ := s.FirstIndex()
	if first != 11 {
		// The snapshot marker at 10 is what a restart loads; entries
		// 8..10 are applied state and not needed again.
		t.Fatalf("first index after reopen %d, want 11", first)
	}
	snap, err := s.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() != 10 {
		t.Fatalf("snapshot %v, %v", snap.GetMetadata(), err)
	}
	_, gotCS, err := s.InitialState()
	if err != nil || len(gotCS.GetVoters()) != 3 {
		t.Fatalf("conf state %v, %v", gotCS, err)
	}
	if applied, err := AppliedIndex(s.DB()); err != nil || applied != 10 {
		t.Fatalf("applied %d, %v", applied, err)
	}
}

// A member added after the last compaction must be sent a snapshot whose
// ConfState lists it (raft refuses one that does not): Snapshot reports
// the applied index and configuration once they differ from the marker's.
func TestSnapshotCarriesConfigurationAppliedSinceCompaction(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	if err := s.Save(&raftpb.HardState{Term: new(uint64(3)), Commit: new(uint64(20))}, append(ents(1, 15, 2), ents(16, 20, 3)...), true); err != nil {
		t.Fatal(err)
	}
	apply := func(index uint64, cs *raftpb.ConfState) { setApplied(t, s, index, cs) }
	three := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	apply(10, three)
	if err := s.CompactLog(10, 7, three); err != nil {
		t.Fatal(err)
	}

	// Entries applied, configuration unchanged: the marker as it is.
	apply(14, three)
	snap, err := s.Snapshot()
	if err != nil || snap.GetMetadata().GetIndex() != 10 {
		t.Fatalf("unchanged configuration: snapshot %v, %v; want the marker at 10", snap.GetMetadata(), err)
	}

	// A learner added at 18: the snapshot must list it, at index 18.
	withLearner := &raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	apply(18, withLearner)
	snap, err = s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	md := snap.GetMetadata()
	if md.GetIndex() != 18 || md.GetTerm() != 3 || len(md.GetConfState().GetLearners()) != 1 || md.GetConfState().GetLearners()[0] != 4 {
		t.Fatalf("after adding learner 4 at 18: snapshot index %d term %d conf %v; want 18, 3, learner 4", md.GetIndex(), md.GetTerm(), md.GetConfState())
	}
}

// A state snapshot streamed from one store and staged into another
// replaces the receiver's state wholesale.
func TestStreamStageInstallSnapshot(t *testing.T) {
	src := open(t, t.TempDir())
	defer src.Close()
	dst := open(t, t.TempDir())
	defer dst.Close()
	for k, v := range map[string]string{"s/m/a": "1", "s/m/b": "2", "s/raft/x": "3"} {
		if err := src.DB().Set([]byte(k), []byte(v), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := dst.DB().Set([]byte("s/m/stale"), []byte("old"), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	st, err := dst.StageSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := src.StreamState(8, st.Write); err != nil { // tiny chunks
		t.Fatal(err)
	}
	if err := st.Commit(42); err != nil {
		t.Fatal(err)
	}
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(42)), Term: new(uint64(3)), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}
	if err := dst.InstallSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"s/m/a": "1", "s/m/b": "2", "s/raft/x": "3"} {
		v, ok, err := get(dst.DB(), []byte(k))
		if err != nil || !ok || string(v) != want {
			t.Fatalf("%s = %q, %v, %v", k, v, ok, err)
		}
	}
	if _, ok, _ := get(dst.DB(), []byte("s/m/stale")); ok {
		t.Fatal("state not in the snapshot survived the install")
	}
	if first, _ := dst.FirstIndex(); first != 43 {
		t.Fatalf("log starts at %d after install, want 43", first)
	}
}

// Options.FS holds everything the store keeps in its data dir: Pebble's
// files, the durability witness, the ballast, and a snapshot staged by a
// follower (which used to go to the real disk whatever the FS).
func TestFSHoldsEverythingInTheDataDir(t *testing.T) {
	src := open(t, t.TempDir())
	defer src.Close()
	for k, v := range map[string]string{"s/m/a": "1", "s/m/b": "2"} {
		if err := src.DB().Set([]byte(k), []byte(v), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}

	dir := filepath.Join(t.TempDir(), "data") // on the real disk, not created
	mem := vfs.NewMem()
	s, err := Open(dir, Options{FS: mem, BallastBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBallast(); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(&raftpb.HardState{Term: new(uint64(2)), Commit: new(uint64(3))}, ents(1, 3, 2), true); err != nil {
		t.Fatal(err)
	}
	st, err := s.StageSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := src.StreamState(8, st.Write); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(42); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Stat(mem.PathJoin(dir, "snap", "42.state")); err != nil {
		t.Fatalf("staged snapshot is not in the store's FS: %v", err)
	}
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(uint64(42)), Term: new(uint64(3)), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}
	if err := s.InstallSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	if left, _ := mem.List(mem.PathJoin(dir, "snap")); len(left) != 0 {
		t.Fatalf("staged files left after install: %v", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{witnessFile, BallastName} {
		if _, err := mem.Stat(mem.PathJoin(dir, name)); err != nil {
			t.Errorf("%s is not in the store's FS: %v", name, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the real data dir %s was written to (stat: %v)", dir, err)
	}

	s, err = Open(dir, Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, ok, err := get(s.DB(), []byte("s/m/b")); err != nil || !ok || string(v) != "2" {
		t.Fatalf("after reopen s/m/b = %q, %v, %v; want the installed snapshot's 2", v, ok, err)
	}
}

// Truncating the log to the applied index (defrag, a NOSPACE alarm) gives
// back the segment being written too once everything in it is applied:
// it used to stay, up to SegmentBytes of entries the state already held
// (2-3 MB per member after a defrag). The HardState, and entries appended
// afterwards, survive a reopen.
func TestTruncateLogToAppliedDropsTheWrittenSegment(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	big := func(lo, hi uint64) []*raftpb.Entry {
		es := ents(lo, hi, 3)
		for _, e := range es {
			e.Data = make([]byte, 4<<10)
		}
		return es
	}
	hs := &raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(200))}
	if err := s.Save(hs, big(1, 200), true); err != nil {
		t.Fatal(err)
	}
	cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	setApplied(t, s, 200, cs)
	before := s.LogBytes()
	if err := s.TruncateLogToApplied(); err != nil {
		t.Fatal(err)
	}
	if after := s.LogBytes(); after > 64<<10 {
		t.Fatalf("raft log takes %d bytes after truncating to the applied index (%d before); want the entries gone", after, before)
	}
	if err := s.Save(&raftpb.HardState{Term: new(uint64(3)), Vote: new(uint64(2)), Commit: new(uint64(201))}, ents(201, 202, 3), true); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dir)
	defer s.Close()
	gotHS, _, err := s.InitialState()
	if err != nil || gotHS.GetTerm() != 3 || gotHS.GetVote() != 2 || gotHS.GetCommit() != 201 {
		t.Fatalf("hard state after reopen %v, %v", gotHS, err)
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 201 || last != 202 {
		t.Fatalf("log after reopen holds %d..%d, want 201..202", first, last)
	}
	if term, err := s.Term(202); err != nil || term != 3 {
		t.Fatalf("term(202) = %d, %v", term, err)
	}
}
