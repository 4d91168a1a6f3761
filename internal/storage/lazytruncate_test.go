package storage

import (
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// firstSegmentEntry is the first entry of the oldest raft log segment on
// disk.
func firstSegmentEntry(t *testing.T, s *Storage) uint64 {
	t.Helper()
	segs, err := listSegments(s.fs, s.logDir())
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	return segs[0].first
}

// A log compaction does not flush the state: it deletes only the segments
// that the state already in tables covers, and those the memtables alone
// cover go at a later compaction, once Pebble has flushed them. A crash in
// between loses no entry a restart needs.
func TestCompactLogWaitsForTheStateInTables(t *testing.T) {
	dir := t.TempDir()
	// Segments of about 9 entries of writeAcked's.
	s, err := Open(dir, Options{WitnessInterval: time.Hour, SegmentBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 200)
	cs := &raftpb.ConfState{Voters: []uint64{1}}
	setApplied(t, s, 150, cs)
	if err := s.CompactLog(150, 100, cs); err != nil {
		t.Fatal(err)
	}
	if first := firstSegmentEntry(t, s); first != 1 {
		t.Fatalf("the oldest segment starts at %d after a compaction whose state is only in the memtables; want 1 (kept)", first)
	}
	if first, _ := s.FirstIndex(); first != 101 {
		t.Fatalf("raft's first index %d, want 101 (the entries kept for catch-up)", first)
	}

	// Pebble flushes the memtable (here by hand, under load when it is
	// full): the next compaction deletes what the marker at 150 covers.
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	setApplied(t, s, 160, cs)
	if err := s.CompactLog(160, 100, cs); err != nil {
		t.Fatal(err)
	}
	first := firstSegmentEntry(t, s)
	if first == 1 || first > 101 {
		t.Fatalf("the oldest segment starts at %d once the marker at 150 is in tables; want the segments up to 100 deleted and 101 kept", first)
	}

	// A crash now: the marker at 160 was only in the memtable. The restart
	// loads the one at 150 and the log from there on.
	crash(t, s)
	s, err = openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatalf("reopen after a crash between a compaction and the next flush: %v", err)
	}
	defer s.Close()
	if fi, _ := s.FirstIndex(); fi != 151 {
		t.Fatalf("first index %d after the crash, want 151 (the marker in tables is at 150)", fi)
	}
	if li, _ := s.LastIndex(); li != 200 {
		t.Fatalf("last index %d after the crash, want 200", li)
	}
	if applied, err := AppliedIndex(s.DB()); err != nil || applied != 150 {
		t.Fatalf("applied %d (%v) after the crash, want 150: raft applies 151.. again from the log", applied, err)
	}
}

// A log that outgrows lazyLogBytes while the memtable fills slowly is
// truncated anyway: the compaction flushes the state, as every compaction
// did before.
func TestCompactLogFlushesWhenTheLogOutgrowsTheMemtable(t *testing.T) {
	s, err := Open(t.TempDir(), Options{WitnessInterval: time.Hour, SegmentBytes: 256 << 10, memTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := []byte(strings.Repeat("v", 64<<10))
	const n = 60 // 3.75 MiB of entries, over twice the 1 MiB memtable
	for i := uint64(1); i <= n; i++ {
		hs := &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(i - 1)}
		if err := s.Save(hs, []*raftpb.Entry{{Index: new(i), Term: new(uint64(2)), Data: big}}, i == n); err != nil {
			t.Fatal(err)
		}
	}
	if got, bound := s.LogBytes(), lazyLogBytes(s.MemTableSize()); got <= bound {
		t.Fatalf("the log holds %d bytes, not over the %d that force a flush: the test writes too little", got, bound)
	}
	cs := &raftpb.ConfState{Voters: []uint64{1}}
	setApplied(t, s, n, cs)
	if err := s.CompactLog(n, n-2, cs); err != nil {
		t.Fatal(err)
	}
	if first := firstSegmentEntry(t, s); first == 1 || first > n-1 {
		t.Fatalf("the oldest segment starts at %d; want the log truncated at %d (a flush forced)", first, n-2)
	}
	if durable, err := s.durableSnapIndex(); err != nil || durable != n {
		t.Fatalf("durable marker %d (%v), want %d", durable, err, n)
	}
}
