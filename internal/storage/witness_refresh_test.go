package storage

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func hardState(term, vote, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: new(term), Vote: new(vote), Commit: new(commit)}
}

func readWitnessOK(t *testing.T, s *Storage) witness {
	t.Helper()
	w, ok, err := s.readWitness()
	if err != nil || !ok {
		t.Fatalf("read witness: ok=%v err=%v", ok, err)
	}
	return w
}

// The witness loop records what the last synced raft log write made
// durable, and what an unsynced write (a commit index advance) added once
// it has synced it itself.
func TestWitnessRefreshRecordsSyncedThenUnsyncedState(t *testing.T) {
	s := open(t, t.TempDir())
	t.Cleanup(func() { s.Close() })
	if err := s.Save(hardState(2, 1, 0), ents(1, 5, 2), true); err != nil {
		t.Fatal(err)
	}
	if err := s.refreshWitness(false); err != nil {
		t.Fatal(err)
	}
	if w := readWitnessOK(t, s); w.Term != 2 || w.Vote != 1 || w.LastIndex != 5 || w.LastTerm != 2 {
		t.Fatalf("witness after a synced save = %+v, want term 2 vote 1 last 5/2", w)
	}
	if err := s.Save(hardState(2, 1, 5), nil, false); err != nil {
		t.Fatal(err)
	}
	if err := s.refreshWitness(false); err != nil {
		t.Fatal(err)
	}
	if w := readWitnessOK(t, s); w.Commit != 5 || w.LastIndex != 5 {
		t.Fatalf("witness after an unsynced commit advance = %+v, want commit 5", w)
	}
}

// A capture older than the witness on disk never replaces it: the loop
// must not write back a term and vote older than the ones Save recorded.
func TestWitnessNeverGoesBack(t *testing.T) {
	s := open(t, t.TempDir())
	t.Cleanup(func() { s.Close() })
	if err := s.Save(hardState(2, 1, 0), ents(1, 3, 2), true); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	old, oldGen := s.synced, s.syncedGen
	s.mu.Unlock()
	if err := s.Save(hardState(3, 2, 0), nil, true); err != nil { // a new term: Save writes the witness
		t.Fatal(err)
	}
	if err := s.writeWitness(old, oldGen); err != nil {
		t.Fatal(err)
	}
	if w := readWitnessOK(t, s); w.Term != 3 || w.Vote != 2 {
		t.Fatalf("witness = %+v, want term 3 vote 2 (not the older capture)", w)
	}
}
