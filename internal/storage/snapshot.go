package storage

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dkv-io/dkv/internal/keys"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A state snapshot travels as a run of uvarint-length-prefixed key/value
// pairs covering [StateStart, StateEnd) at one Pebble snapshot. The
// receiver stages it in a file named by the raft snapshot index and loads
// it only when raft hands it the snapshot in a Ready, so a snapshot raft
// refuses never touches the state.
//
// Staged files go through Options.FS like everything else in the data
// dir, but unwrapped (rawFS): a snapshot that meets a full disk fails and
// is sent again later, and must not take the ballast kept for Pebble's
// own writes (space.go).

// StreamState writes the whole replicated state, as of one consistent
// Pebble snapshot, to emit in chunks of about chunkBytes.
func (s *Storage) StreamState(chunkBytes int, emit func(chunk []byte) error) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: StateStart, UpperBound: StateEnd})
	if err != nil {
		return err
	}
	defer it.Close()
	buf := make([]byte, 0, chunkBytes+4096)
	for it.First(); it.Valid(); it.Next() {
		buf = binary.AppendUvarint(buf, uint64(len(it.Key())))
		buf = append(buf, it.Key()...)
		v := it.Value()
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
		if len(buf) >= chunkBytes {
			if err := emit(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	if len(buf) > 0 {
		return emit(buf)
	}
	return nil
}

// Stager receives an incoming snapshot's state into a staging file.
type Stager struct {
	s    *Storage
	f    vfs.File
	w    *bufio.Writer
	path string
}

// stageSeq makes the names of concurrent staging files unique; files left
// by an earlier process are removed at Open (finishInstall).
var stageSeq atomic.Uint64

// StageSnapshot starts receiving a snapshot.
func (s *Storage) StageSnapshot() (*Stager, error) {
	fs, dir := s.rawFS, s.snapDir()
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	name := "incoming-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatUint(stageSeq.Add(1), 10)
	path := fs.PathJoin(dir, name)
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	return &Stager{s: s, f: f, w: bufio.NewWriterSize(f, 1<<20), path: path}, nil
}

// Write appends a chunk produced by StreamState.
func (st *Stager) Write(chunk []byte) error {
	_, err := st.w.Write(chunk)
	return err
}

// Commit makes the staged state durable under the snapshot's index.
func (st *Stager) Commit(index uint64) error {
	if err := st.w.Flush(); err != nil {
		st.Abort()
		return err
	}
	if err := st.f.Sync(); err != nil {
		st.Abort()
		return err
	}
	fs := st.s.rawFS
	if err := st.f.Close(); err != nil {
		fs.Remove(st.path)
		return err
	}
	if err := fs.Rename(st.path, st.s.stagedPath(index)); err != nil {
		return err
	}
	// The rename is durable only once the directory is synced.
	d, err := fs.OpenDir(st.s.snapDir())
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Abort discards a partial snapshot.
func (st *Stager) Abort() {
	st.f.Close()
	st.s.rawFS.Remove(st.path)
}

func (s *Storage) snapDir() string { return s.rawFS.PathJoin(s.dir, "snap") }

func (s *Storage) stagedPath(index uint64) string {
	return s.rawFS.PathJoin(s.snapDir(), strconv.FormatUint(index, 10)+".state")
}

var keyInstalling = keys.SnapshotInstalling

// layoutValueOnce is mvcc.LayoutValueOnce, the keyspace layout whose data
// dirs are in FormatValueOnce.
const layoutValueOnce = 3

// InstallSnapshot replaces the replicated state with the staged snapshot
// for snap's index and resets the raft log to start after it. A crash
// midway is finished at the next Open: the "installing" marker is set
// (synced) before the state is touched and cleared after.
func (s *Storage) InstallSnapshot(snap *raftpb.Snapshot) error {
	index := snap.GetMetadata().GetIndex()
	path := s.stagedPath(index)
	if _, err := s.rawFS.Stat(path); err != nil {
		return fmt.Errorf("no staged state for snapshot %d: %w", index, err)
	}
	meta, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	if err := s.db.Set(keyInstalling, meta, pebble.NoSync); err != nil {
		return err
	}
	if err := s.db.Flush(); err != nil {
		return err
	}
	if err := s.loadStaged(path, meta); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The state is durable: the log now starts after the snapshot (a
	// crash before this keeps the older entries, which load drops).
	if err := s.rlog.reset(snap.GetMetadata(), s.hardState); err != nil {
		s.mu.Unlock()
		s.logFailed(err) // never returns
	}
	if err := s.MemoryStorage.ApplySnapshot(snap); err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
		return err
	}
	s.lastIndex = index
	s.kickWitness()
	return nil
}

// loadStaged writes the staged state and the raft snapshot marker, then
// clears the installing marker and removes staged files.
func (s *Storage) loadStaged(path string, snapMeta []byte) error {
	f, err := s.rawFS.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	b := s.db.NewBatch()
	if err := b.DeleteRange(StateStart, StateEnd, nil); err != nil {
		return err
	}
	format := FormatRaftLog // unless the state is in layout 3
	for {
		k, err := readChunk(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Close()
			return fmt.Errorf("staged snapshot %s: %w", path, err)
		}
		val, err := readChunk(r)
		if err != nil {
			b.Close()
			return fmt.Errorf("staged snapshot %s: %w", path, err)
		}
		if err := b.Set(k, val, nil); err != nil {
			return err
		}
		if bytes.Equal(k, keys.MVCCLayout) && len(val) == 8 && binary.BigEndian.Uint64(val) >= layoutValueOnce {
			format = FormatValueOnce
		}
		if b.Len() > 8<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return err
			}
			b.Close()
			b = s.db.NewBatch()
		}
	}
	if err := b.Set(keySnapMeta, snapMeta, nil); err != nil {
		return err
	}
	// The data dir's format follows the layout of the state it now holds
	// (format.go).
	if err := RecordFormat(b, format); err != nil {
		return err
	}
	if err := b.Delete(keyInstalling, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	b.Close()
	if err := s.db.Flush(); err != nil {
		return err
	}
	s.cleanStaged()
	return nil
}

func (s *Storage) cleanStaged() {
	names, _ := s.rawFS.List(s.snapDir())
	for _, name := range names {
		s.rawFS.Remove(s.rawFS.PathJoin(s.snapDir(), name))
	}
}

// finishInstall completes an InstallSnapshot interrupted by a crash; the
// installing marker holds the snapshot's raft metadata, returned so that
// the raft log is reset to it too.
func (s *Storage) finishInstall() (*raftpb.SnapshotMetadata, error) {
	meta, ok, err := get(s.db, keyInstalling)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.cleanStaged()
		return nil, nil
	}
	snap := &raftpb.Snapshot{}
	if err := proto.Unmarshal(meta, snap); err != nil {
		return nil, fmt.Errorf("decode interrupted snapshot install: %w", err)
	}
	if err := s.loadStaged(s.stagedPath(snap.GetMetadata().GetIndex()), meta); err != nil {
		return nil, err
	}
	return snap.GetMetadata(), nil
}

func readChunk(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > 1<<30 {
		return nil, fmt.Errorf("record of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return buf, nil
}
