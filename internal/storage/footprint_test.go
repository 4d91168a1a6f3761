package storage

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMemTableSizedToStore(t *testing.T) {
	for _, c := range []struct {
		data, want uint64
	}{
		{0, 16 << 20},
		{10 << 20, 16 << 20},
		{65 << 20, 32 << 20},
		{100 << 20, 32 << 20},
		{256 << 20, 64 << 20},
		{10 << 30, 64 << 20},
	} {
		if got := memTableSizeFor(c.data); got != c.want {
			t.Errorf("memTableSizeFor(%d MiB) = %d MiB, want %d MiB", c.data>>20, got>>20, c.want>>20)
		}
	}
	for _, c := range []struct {
		configured, want int64
		largest          int64
	}{
		{0, 5 << 20, 5 << 20},
		{0, minBallast, 1 << 20},
		{0, minBallast, 0},
		{0, 65 << 20, 65 << 20},
		{-1, 0, 5 << 20},
		{1 << 20, 1 << 20, 64 << 20},
	} {
		if got := ballastFor(c.configured, c.largest); got != c.want {
			t.Errorf("ballastFor(%d, largest write %d) = %d, want %d", c.configured, c.largest, got, c.want)
		}
	}
}

// A new store gets the smallest memtable and ballast, and its ballast
// file records its size; a ballast an earlier version left (fixed 64 MiB,
// length 0) is replaced by one of the size in force.
func TestBallastSizedToStore(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, BallastName)
	f, err := os.Create(old)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.MemTableSize() != minMemTable || s.BallastBytes() != minBallast {
		t.Fatalf("new store: memtable %d, ballast %d; want %d and %d", s.MemTableSize(), s.BallastBytes(), minMemTable, minBallast)
	}
	if err := s.EnsureBallast(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(old)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != s.BallastBytes() {
		t.Fatalf("ballast file is %d bytes, want %d", fi.Size(), s.BallastBytes())
	}
	// Turned off: the file goes.
	s.ballastBytes = 0
	if err := s.EnsureBallast(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("ballast off, but the file is still there (%v)", err)
	}
}
