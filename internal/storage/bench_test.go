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
