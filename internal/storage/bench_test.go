package storage

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// BenchmarkSaveSynced is the raft write path: one synced Ready of one
// 200-byte entry (plus its HardState) at a time, as the Ready loop does.
func BenchmarkSaveSynced(b *testing.B) {
	benchSave(b, Options{})
}

func benchSave(b *testing.B, opts Options) {
	s, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 200)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		idx := uint64(i + 1)
		hs := &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(idx - 1)}
		e := &raftpb.Entry{Index: new(idx), Term: new(uint64(2)), Data: data}
		if err := s.Save(hs, []*raftpb.Entry{e}, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSaveBatch is the CPU of the raft log write without the fsync:
// one Ready of 16 entries of 256 bytes, as under load, unsynced so the
// disk does not hide the cost.
func BenchmarkSaveBatch(b *testing.B) {
	s, err := Open(b.TempDir(), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	data := make([]byte, 256)
	ents := make([]*raftpb.Entry, 16)
	b.ReportAllocs()
	b.ResetTimer()
	idx := uint64(0)
	for i := 0; i < b.N; i++ {
		for j := range ents {
			idx++
			ents[j] = &raftpb.Entry{Index: new(idx), Term: new(uint64(2)), Data: data}
		}
		hs := &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(idx - 16)}
		if err := s.Save(hs, ents, true); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			// Keep the MemoryStorage from growing without bound.
			if err := s.MemoryStorage.Compact(idx - 16); err != nil {
				b.Fatal(err)
			}
		}
	}
}
