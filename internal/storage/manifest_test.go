package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
)

// A raft log with a hole used to panic in raft's MemoryStorage.Append
// ("missing log entry [last: 0, append at: 21]"); Open must refuse it as
// damage, saying where the log is good up to. The raft log's segments are
// cut small here so that losing one is a hole: the first segment (the
// state has no snapshot covering it), one in the middle, the newest
// (entries below the commit index), and the state going back to before
// the log's start after a compaction (what a MANIFEST cut short leaves:
// Pebble opens an older version of the state).
func TestLogHoleRefusedNotPanic(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage breaks the data dir, given its segments (oldest first),
		// and returns the last good index and the problem wanted.
		damage func(t *testing.T, s *Storage, segs []segment) (uint64, string)
	}{
		{"first entries lost", func(t *testing.T, s *Storage, segs []segment) (uint64, string) {
			removeSegment(t, s, segs[0])
			return 0, fmt.Sprintf("entries 1 to %d are missing", segs[1].first-1)
		}},
		{"hole in the middle", func(t *testing.T, s *Storage, segs []segment) (uint64, string) {
			removeSegment(t, s, segs[2])
			return segs[2].first - 1, fmt.Sprintf("entries %d to %d are missing", segs[2].first, segs[3].first-1)
		}},
		// Refused by the witness check: the newest HardState went with
		// the segment.
		{"tail lost below the commit", func(t *testing.T, s *Storage, segs []segment) (uint64, string) {
			last := segs[len(segs)-1]
			removeSegment(t, s, last)
			return last.first - 1, "the commit index went back from 49"
		}},
		{"state gone back past the log's start", func(t *testing.T, s *Storage, segs []segment) (uint64, string) {
			if err := s.compactLog(segs[2].first, segs[2].first, &raftpb.ConfState{Voters: []uint64{1}}, true); err != nil {
				t.Fatal(err)
			}
			if err := s.db.Delete(keySnapMeta, pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
			return 0, fmt.Sprintf("entries 1 to %d are missing", segs[2].first-1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// Segments of about 9 entries of writeAcked's.
			s, err := Open(dir, Options{WitnessInterval: time.Hour, SegmentBytes: 2 << 10})
			if err != nil {
				t.Fatal(err)
			}
			writeAcked(t, s, 1, 50)
			segs, err := listSegments(s.fs, s.logDir())
			if err != nil || len(segs) < 4 {
				t.Fatalf("%d segments (%v), want at least 4", len(segs), err)
			}
			lastGood, problem := tc.damage(t, s, segs)
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
			if de.LastGood != lastGood || !strings.Contains(de.Problem, problem) {
				t.Fatalf("damage %q with last good index %d; want %q and %d", de.Problem, de.LastGood, problem, lastGood)
			}
			if de.Witness == nil || de.Witness.LastIndex != 50 {
				t.Errorf("damage %+v does not say what the witness recorded as durable (last index 50)", de)
			}
		})
	}
}

func removeSegment(t *testing.T, s *Storage, g segment) {
	t.Helper()
	if err := os.Remove(filepath.Join(s.logDir(), g.name())); err != nil {
		t.Fatal(err)
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
		if err := s.db.Set([]byte{'x', byte(i)}, []byte("v"), pebble.NoSync); err != nil {
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
