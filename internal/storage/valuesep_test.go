package storage

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	raftpb "go.etcd.io/raft/v3/raftpb"
)

// A data dir written without value separation (as releases before it
// were) opens with it and serves its large log entries and values; what is
// then written goes to blob files, survives flush, compaction and reopen,
// and a data dir holding blob files still opens and reads with separation
// off (a rollback).
func TestLargeValuesAcrossValueSeparation(t *testing.T) {
	defer func(v bool) { separateValues = v }(separateValues)
	dir := t.TempDir()
	big := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 64<<10) }
	stateKey := func(i int) []byte { return fmt.Appendf(nil, "s/test/%03d", i) }
	write := func(s *Storage, lo, hi int) {
		t.Helper()
		var es []*raftpb.Entry
		for i := lo; i <= hi; i++ {
			es = append(es, &raftpb.Entry{Index: new(uint64(i)), Term: new(uint64(1)), Data: big(i)})
			if err := s.DB().Set(stateKey(i), big(i+1), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Save(&raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(hi))}, es, true); err != nil {
			t.Fatal(err)
		}
		if err := s.DB().Flush(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(s *Storage, hi int) {
		t.Helper()
		es, err := s.Entries(1, uint64(hi)+1, 1<<40)
		if err != nil || len(es) != hi {
			t.Fatalf("entries 1..%d: %d entries, %v", hi, len(es), err)
		}
		for i, e := range es {
			if !bytes.Equal(e.Data, big(i+1)) {
				t.Fatalf("entry %d: data differs", i+1)
			}
			v, c, err := s.DB().Get(stateKey(i + 1))
			if err != nil {
				t.Fatalf("state key %d: %v", i+1, err)
			}
			if !bytes.Equal(v, big(i+2)) {
				t.Fatalf("state key %d: value differs", i+1)
			}
			c.Close()
		}
	}
	blobFiles := func(s *Storage) uint64 { return s.DB().Metrics().BlobFiles.LiveCount }

	separateValues = false
	s := open(t, dir)
	write(s, 1, 20)
	if n := blobFiles(s); n != 0 {
		t.Fatalf("without separation: %d blob files", n)
	}
	s.Close()

	separateValues = true
	s = open(t, dir)
	check(s, 20)
	write(s, 21, 40)
	if n := blobFiles(s); n == 0 {
		t.Fatal("with separation: no blob files after a flush of 64 KiB values")
	}
	if err := s.DB().Compact(t.Context(), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	check(s, 40)
	s.Close()

	s = open(t, dir)
	check(s, 40)
	s.Close()

	separateValues = false
	s = open(t, dir)
	check(s, 40)
	write(s, 41, 45)
	check(s, 45)
	s.Close()
}
