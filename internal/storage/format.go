package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keys"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Format is the on-disk layout this build reads and writes: which records
// the state and the raft log are kept in, and how. A change of layout
// that an older build would misread (it would find no data where the new
// layout keeps it, and serve an empty keyspace) raises it, with a
// migration from the previous format at open.
//
//	1: the raft log and HardState in Pebble, beside the state
//	   (r/e/<index>, r/hs).
//	2: the raft log in segment files under raftlog/ (raftlog.go); Pebble
//	   holds the state and the compaction snapshot marker only.
//	3: as 2, with the state in mvcc.LayoutValueOnce (no latest records;
//	   each value written once). The state moves there by a replicated
//	   command, which records format 3 in the batch that applies it
//	   (RecordFormat); an installed snapshot records the format of the
//	   layout it holds.
const Format = FormatValueOnce

// The formats this build writes. A new or migrated data dir starts in
// FormatRaftLog: its state is in layout 2 until the cluster moves it.
const (
	FormatRaftLog   = 2
	FormatValueOnce = 3
)

// RecordFormat records format n in b, a batch on the member's database:
// for the state machine, in the batch that changes the state's layout.
func RecordFormat(b *pebble.Batch, n int) error {
	return b.Set(metaKey(formatMeta), []byte(strconv.Itoa(n)), nil)
}

// formatMeta names the node-local record holding the data dir's format.
const formatMeta = "format"

// MigrationBackupDir is the checkpoint of a format-1 database taken
// before it is migrated, in the data dir. It is deleted at the first
// raft log compaction after the migration (the member has then applied
// and persisted entries on the new layout).
const MigrationBackupDir = "format1-backup"

// migrateCrash, when set (tests), is asked at each stage of a migration
// whether to stop there as a crash would.
var migrateCrash func(stage string) bool

// ErrNewerFormat is wrapped by Open's error for a data dir written by a
// newer build, whose layout this one cannot read.
var ErrNewerFormat = errors.New("data dir written by a newer DKV")

// checkFormat refuses a data dir of a newer format, migrates one of an
// older format, and records the current format in a new one. Run before
// anything reads the state or the raft log.
func (s *Storage) checkFormat() error {
	b, ok, err := s.Meta(formatMeta)
	if err != nil {
		return err
	}
	v := 1 // every data dir from before the record existed
	if ok {
		if v, err = strconv.Atoi(string(b)); err != nil || v < 1 {
			return &DamageError{Dir: s.dir, Problem: fmt.Sprintf("the data dir's format record is %q, not a format number", b)}
		}
	} else if fresh, err := s.freshDB(); err != nil {
		return err
	} else if fresh {
		if segs, err := listSegments(s.fs, s.logDir()); err == nil && len(segs) > 0 {
			// Records the database wrote at its first open are gone
			// while the raft log they came with is not: its files were
			// lost, or Pebble opened an older version of them (a
			// MANIFEST cut short, which logDamage names).
			return s.logDamage(0, "the database has lost its records (its storage format, raft snapshot marker and identity) while the raft log in "+raftLogDir+"/ holds raft state")
		}
		// A new data dir, or one a restore built: its format follows
		// the layout of the state it holds.
		v = FormatRaftLog
		if l, ok, err := get(s.db, keys.MVCCLayout); err != nil {
			return err
		} else if ok && len(l) == 8 && binary.BigEndian.Uint64(l) >= layoutValueOnce {
			v = FormatValueOnce
		}
	}
	switch {
	case v > Format:
		return fmt.Errorf("%w: %s is in storage format %d and this build reads format %d at most; run the DKV release that wrote it (or a newer one), or restore a backup into a new data dir", ErrNewerFormat, s.dir, v, Format)
	case v == 1:
		return s.migrate1to2()
	case !ok:
		return s.SetMeta(formatMeta, []byte(strconv.Itoa(v)))
	}
	return nil
}

// freshDB: nothing of raft's was ever written (a new data dir, or a
// member waiting to join).
func (s *Storage) freshDB() (bool, error) {
	for _, k := range [][]byte{keyHardState, keySnapMeta} {
		if _, ok, err := get(s.db, k); err != nil || ok {
			return false, err
		}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(0), UpperBound: entryKey(^uint64(0))})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return !it.First(), it.Error()
}

func (s *Storage) logDir() string { return s.rawFS.PathJoin(s.dir, raftLogDir) }

// migrate1to2 moves the raft log and HardState out of Pebble into
// raftlog/. The old database is checkpointed first (MigrationBackupDir).
// A crash at any point leaves Pebble untouched until the last step: the
// log is written in raftlog.tmp/ and renamed, then one synced batch
// deletes the old records and records format 2. A restart that finds
// format 1 starts over.
func (s *Storage) migrate1to2() error {
	fs := s.rawFS
	crashAt := func(stage string) error {
		if migrateCrash != nil && migrateCrash(stage) {
			return fmt.Errorf("migrate: simulated crash %s", stage)
		}
		return nil
	}
	s.log.Info("migrating the data dir from storage format 1 to 2: the raft log moves out of the database into its own segment files", "component", "storage", "dir", s.dir)
	backup := fs.PathJoin(s.dir, MigrationBackupDir)
	if err := fs.RemoveAll(backup); err != nil {
		return fmt.Errorf("migrate: remove an earlier backup: %w", err)
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("migrate: flush before the backup: %w", err)
	}
	if err := s.db.Checkpoint(backup); err != nil {
		return fmt.Errorf("migrate: back up the format-1 database to %s: %w", backup, err)
	}
	if err := crashAt("after the backup"); err != nil {
		return err
	}
	tmp := s.logDir() + ".tmp"
	for _, d := range []string{tmp, s.logDir()} {
		if err := fs.RemoveAll(d); err != nil {
			return fmt.Errorf("migrate: remove an unfinished raft log: %w", err)
		}
	}
	if err := fs.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	var hs *raftpb.HardState
	if b, ok, err := get(s.db, keyHardState); err != nil {
		return err
	} else if ok {
		hs = &raftpb.HardState{}
		if err := proto.Unmarshal(b, hs); err != nil {
			return fmt.Errorf("migrate: decode hard state: %w", err)
		}
	}
	var first uint64 = 1
	if b, ok, err := get(s.db, keySnapMeta); err != nil {
		return err
	} else if ok {
		snap, err := decodeSnapMeta(b)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		first = snap.GetMetadata().GetIndex() + 1
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(first), UpperBound: entryKey(^uint64(0))})
	if err != nil {
		return err
	}
	l, err := openLogForAppend(fs, tmp, nil, first, hs, !s.sync, s.segBytes)
	if err != nil {
		it.Close()
		return fmt.Errorf("migrate: %w", err)
	}
	var batch []*raftpb.Entry
	var batchBytes, n int
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		next := batch[len(batch)-1].GetIndex() + 1
		err := l.save(nil, batch, false, next, hs)
		batch, batchBytes = batch[:0], 0
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(it.Value(), e); err != nil {
			it.Close()
			l.close()
			return fmt.Errorf("migrate: decode entry %x: %w", it.Key(), err)
		}
		batch = append(batch, e)
		batchBytes += len(it.Value())
		n++
		if batchBytes >= 1<<20 {
			if err := flush(); err != nil {
				it.Close()
				l.close()
				return fmt.Errorf("migrate: %w", err)
			}
		}
	}
	err = errors.Join(it.Error(), it.Close(), flush())
	if err == nil {
		err = l.sync()
	}
	if cerr := l.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("migrate: write the raft log: %w", err)
	}
	if err := crashAt("after writing raftlog.tmp"); err != nil {
		return err
	}
	if err := fs.Rename(tmp, s.logDir()); err != nil {
		return err
	}
	if err := syncDir(fs, s.dir); err != nil {
		return err
	}
	if err := crashAt("after the rename to raftlog"); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	err = errors.Join(
		b.DeleteRange(entryKey(0), entryKey(^uint64(0)), nil),
		b.Delete(keyHardState, nil),
		RecordFormat(b, FormatRaftLog),
	)
	if err == nil {
		err = b.Commit(pebble.NoSync)
	}
	if err == nil {
		err = s.db.Flush()
	}
	if err != nil {
		return fmt.Errorf("migrate: drop the old raft log from the database: %w", err)
	}
	s.migrated = true
	s.log.Info("migrated the data dir to storage format 2", "component", "storage", "dir", s.dir, "entries", n, "first_index", first,
		"backup", backup, "backup_kept_until", "the first raft log compaction on the new layout")
	return nil
}

// readLog reads the raft log; installed is the snapshot an interrupted
// install just finished, whose reset the log may lack.
func (s *Storage) readLog(installed *raftpb.SnapshotMetadata) (*logContents, []segment, error) {
	dir := s.logDir()
	if err := s.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create the raft log dir: %w", err)
	}
	segs, c, err := readLog(s.fs, dir)
	var sd *segmentDamage
	if errors.As(err, &sd) {
		de := &DamageError{Dir: s.dir, File: sd.file, Problem: sd.problem, LastGood: sd.lastGood}
		s.attachWitness(de)
		return nil, nil, de
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read the raft log: %w", err)
	}
	if installed != nil {
		c.reset, c.ents = installed, nil
	}
	return c, segs, nil
}

// startLog opens the raft log for appending, in a new segment after
// segs, once what it holds was loaded and checked.
func (s *Storage) startLog(segs []segment, installed *raftpb.SnapshotMetadata) error {
	s.mu.Lock()
	hs, next := s.hardState, s.lastIndex+1
	s.mu.Unlock()
	l, err := openLogForAppend(s.fs, s.logDir(), segs, next, hs, !s.sync, s.segBytes)
	if err != nil {
		return fmt.Errorf("open the raft log: %w", err)
	}
	s.rlog = l
	if installed != nil {
		if err := s.rlog.reset(installed, hs); err != nil {
			s.rlog.close()
			return err
		}
	}
	return nil
}

// newestSegment is the path of the raft log's newest segment (for damage
// reports), "" if none.
func (s *Storage) newestSegment(segs []segment) string {
	if n := len(segs); n > 0 {
		return s.fs.PathJoin(s.logDir(), segs[n-1].name())
	}
	return ""
}

// dropMigrationBackup deletes the format-1 checkpoint once the log has
// been compacted on the new layout.
func (s *Storage) dropMigrationBackup() {
	if !s.migrated {
		return
	}
	s.migrated = false
	backup := s.rawFS.PathJoin(s.dir, MigrationBackupDir)
	if err := s.rawFS.RemoveAll(backup); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.logf("cannot remove the format-1 backup %s (remove it by hand): %v", backup, err)
		return
	}
	s.log.Info("removed the format-1 backup: the member compacted its raft log on format 2", "component", "storage", "backup", backup)
}
