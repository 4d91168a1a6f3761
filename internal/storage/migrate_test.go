package storage

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// writeFormat1 makes dir a format-1 data dir as the builds before format
// 2 wrote it: the HardState, a compaction snapshot marker at snap and
// entries snap+1..last in Pebble, beside one state record.
func writeFormat1(t *testing.T, dir string, snap, last uint64) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	set := func(k []byte, m proto.Message) {
		v, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Set(k, v, nil); err != nil {
			t.Fatal(err)
		}
	}
	set(keyHardState, &raftpb.HardState{Term: new(uint64(2)), Vote: new(uint64(1)), Commit: new(last)})
	cs := &raftpb.ConfState{Voters: []uint64{1}}
	set(keySnapMeta, &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(snap), Term: new(uint64(2)), ConfState: cs}})
	for i := snap + 1; i <= last; i++ {
		set(entryKey(i), &raftpb.Entry{Index: new(i), Term: new(uint64(2)), Data: fmt.Appendf(nil, "entry %d", i)})
	}
	if err := b.Set(metaKey(formatMeta), []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(append(append([]byte{}, StateStart...), "k"...), []byte("state"), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// wantMigrated checks that s holds the format-1 log written by
// writeFormat1, now in format 2.
func wantMigrated(t *testing.T, s *Storage, snap, last uint64) {
	t.Helper()
	if v, ok, err := s.Meta(formatMeta); err != nil || !ok || string(v) != "2" {
		t.Fatalf("format record %q %v %v after the migration, want 2", v, ok, err)
	}
	first, _ := s.FirstIndex()
	li, _ := s.LastIndex()
	if first != snap+1 || li != last {
		t.Fatalf("log [%d, %d] after the migration, want [%d, %d]", first, li, snap+1, last)
	}
	ents, err := s.Entries(first, li+1, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if want := fmt.Sprintf("entry %d", e.GetIndex()); string(e.GetData()) != want {
			t.Fatalf("entry %d holds %q, want %q", e.GetIndex(), e.GetData(), want)
		}
	}
	hs, _, _ := s.InitialState()
	if hs.GetTerm() != 2 || hs.GetVote() != 1 || hs.GetCommit() != last {
		t.Fatalf("HardState %v after the migration", hs)
	}
	for _, k := range [][]byte{keyHardState, entryKey(last)} {
		if _, ok, _ := get(s.db, k); ok {
			t.Errorf("format-1 record %q still in the database", k)
		}
	}
	if v, ok, _ := get(s.db, append(append([]byte{}, StateStart...), "k"...)); !ok || string(v) != "state" {
		t.Errorf("state record lost in the migration: %q %v", v, ok)
	}
}

// A format-1 data dir is migrated at open: the raft log, HardState and
// compaction marker carry over, the old records go, a backup of the old
// database stays until the first log compaction, and the next open finds
// format 2 with nothing to do.
func TestMigrateFormat1(t *testing.T) {
	dir := t.TempDir()
	writeFormat1(t, dir, 10, 400)
	var logb strings.Builder
	s, err := Open(dir, Options{WitnessInterval: time.Hour, Logger: slogTo(&logb)})
	if err != nil {
		t.Fatal(err)
	}
	wantMigrated(t, s, 10, 400)
	for _, want := range []string{"migrating the data dir from storage format 1 to 2", "migrated the data dir to storage format 2"} {
		if !strings.Contains(logb.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logb.String())
		}
	}
	backup := filepath.Join(dir, MigrationBackupDir)
	if _, err := os.Stat(filepath.Join(backup, "OPTIONS-000001")); err != nil && !hasFile(backup, "MANIFEST-") {
		t.Fatalf("no backup of the format-1 database in %s: %v", backup, err)
	}
	writeAcked(t, s, 401, 410)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	logb.Reset()
	s, err = Open(dir, Options{WitnessInterval: time.Hour, Logger: slogTo(&logb)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logb.String(), "migrating") {
		t.Errorf("second open migrated again:\n%s", logb.String())
	}
	if li, _ := s.LastIndex(); li != 410 {
		t.Fatalf("last index %d after reopening, want 410", li)
	}
	if !hasFile(backup, "MANIFEST-") {
		t.Fatal("the backup went before any log compaction")
	}
	s.migrated = true // as if this open had migrated: the first compaction on durable state drops the backup
	cs := &raftpb.ConfState{Voters: []uint64{1}}
	if err := s.CompactLog(405, 400, cs); err != nil {
		t.Fatal(err)
	}
	if !hasFile(backup, "MANIFEST-") {
		t.Fatal("the backup went at a log compaction whose state was not yet in tables")
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.CompactLog(410, 400, cs); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(backup); !os.IsNotExist(err) {
		t.Fatalf("backup still there after a log compaction: %v", err)
	}
	s.Close()
}

// A crash at any stage of the migration leaves a data dir that the next
// open migrates completely, with nothing lost and nothing doubled.
func TestMigrateFormat1CrashAtEveryStage(t *testing.T) {
	defer func() { migrateCrash = nil }()
	for _, stage := range []string{"after the backup", "after writing raftlog.tmp", "after the rename to raftlog"} {
		t.Run(stage, func(t *testing.T) {
			dir := t.TempDir()
			writeFormat1(t, dir, 0, 250)
			hit := false
			migrateCrash = func(s string) bool {
				if s == stage {
					hit = true
				}
				return s == stage
			}
			if _, err := Open(dir, Options{WitnessInterval: time.Hour}); err == nil || !strings.Contains(err.Error(), "simulated crash") {
				t.Fatalf("open with a crash %s: %v", stage, err)
			}
			if !hit {
				t.Fatalf("stage %q never reached", stage)
			}
			migrateCrash = nil
			s, err := Open(dir, Options{WitnessInterval: time.Hour})
			if err != nil {
				t.Fatalf("open after a crash %s: %v", stage, err)
			}
			defer s.Close()
			wantMigrated(t, s, 0, 250)
		})
	}
}

func hasFile(dir, prefix string) bool {
	names, _ := os.ReadDir(dir)
	for _, n := range names {
		if strings.HasPrefix(n.Name(), prefix) {
			return true
		}
	}
	return false
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(&syncWriter{w: w}, nil))
}
