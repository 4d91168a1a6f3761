package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// A raft log that lost its first entries (what a MANIFEST cut short left:
// Pebble opened an older version, the WAL still held the tail) used to
// panic in raft's MemoryStorage.Append ("missing log entry [last: 0,
// append at: 21]"); Open must refuse it as damage, saying where the log
// is good up to. A hole in the middle, and a commit index past the log's
// end, likewise.
func TestLogHoleRefusedNotPanic(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lo, hi   uint64 // entries [lo, hi) are deleted
		lastGood uint64
		problem  string
	}{
		{"first entries lost", 1, 21, 0, "entries 1 to 20 are missing"},
		{"hole in the middle", 10, 21, 9, "entries 10 to 20 are missing"},
		// Already refused before (the witness check), with the same index.
		{"tail lost below the commit", 31, 51, 30, "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := openNoWitnessLoop(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			writeAcked(t, s, 1, 50)
			if err := s.db.DeleteRange(entryKey(tc.lo), entryKey(tc.hi), pebble.Sync); err != nil {
				t.Fatal(err)
			}
			crash(t, s)
			var de *DamageError
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Open panicked on a log with a hole: %v", r)
					}
				}()
				_, err = openNoWitnessLoop(t, dir)
				de = wantDamage(t, err, "", 0)
			}()
			if de.LastGood != tc.lastGood || !strings.Contains(de.Problem, tc.problem) {
				t.Fatalf("damage %q with last good index %d; want %q and %d", de.Problem, de.LastGood, tc.problem, tc.lastGood)
			}
			if de.Witness == nil || de.Witness.LastIndex != 50 {
				t.Errorf("damage %+v does not say what the witness recorded as durable (last index 50)", de)
			}
		})
	}
}

// A MANIFEST with two bytes flipped in its middle is refused before
// Pebble reads it (Pebble would open an older version past the damage),
// naming it; one cut short is a possible torn write and opens when the
// log it leaves is whole.
func TestDamagedManifestRefusedBeforePebbleOpens(t *testing.T) {
	dir := t.TempDir()
	s, err := openNoWitnessLoop(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	writeAcked(t, s, 1, 50)
	for i := range 5 { // a few version edits
		if err := s.db.Set([]byte{'x', byte(i)}, []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m := currentManifest(s.rawFS, dir)
	if m == "" {
		t.Fatal("no current MANIFEST")
	}
	if tail, err := checkManifest(s.rawFS, dir); err != nil || tail != nil {
		t.Fatalf("intact MANIFEST: tail %+v, err %v", tail, err)
	}
	b, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	good := append([]byte(nil), b...)
	b[len(b)/2] ^= 0xff
	b[len(b)/2+1] ^= 0xff
	if err := os.WriteFile(m, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = openNoWitnessLoop(t, dir)
	wantDamage(t, err, m, 0)
	t.Log(err)
	// The last record torn: not damage by itself.
	if err := os.WriteFile(m, good[:len(good)-3], 0o644); err != nil {
		t.Fatal(err)
	}
	tail, err := checkManifest(s.rawFS, dir)
	if err != nil || tail == nil || tail.path != m || filepath.Dir(tail.path) != dir {
		t.Fatalf("torn MANIFEST: tail %+v, err %v; want its incomplete end", tail, err)
	}
}
