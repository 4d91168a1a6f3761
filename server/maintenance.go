package server

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/dkv-io/dkv/internal/backup/etcdsnap"
	"github.com/dkv-io/dkv/internal/backup/restore"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/server/grpcapi"
)

// checkpoint is a Pebble checkpoint of this node's database taken into
// the data dir (so it hard-links rather than copies table files), and
// what it holds. remove deletes it. The write-ahead log is flushed first:
// without that the checkpoint's copy of it can miss the last applied
// writes, which sit in the log's buffer.
type checkpoint struct {
	dir      string
	files    []string
	total    int64 // tar bytes, roughly
	contents restore.Contents
}

func (s *Server) takeCheckpoint() (*checkpoint, error) {
	dir := filepath.Join(s.cfg.DataDir, "snapshot-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	// The state has no write-ahead log: what is only in the memtables
	// would be missing from the checkpoint.
	if err := s.store.DB().Flush(); err != nil {
		return nil, dkverr.New(dkverr.Internal, "flush before the checkpoint: %v", err)
	}
	if err := s.store.DB().Checkpoint(dir); err != nil {
		return nil, dkverr.New(dkverr.Internal, "checkpoint: %v", err)
	}
	cp := &checkpoint{dir: dir}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		cp.files = append(cp.files, p)
		cp.total += fi.Size() + 1024 // tar header and padding, roughly
		return nil
	})
	if err == nil {
		cp.contents, err = restore.Inspect(dir)
	}
	if err != nil {
		cp.remove()
		return nil, dkverr.New(dkverr.Internal, "read checkpoint: %v", err)
	}
	return cp, nil
}

func (cp *checkpoint) remove() { os.RemoveAll(cp.dir) }

// writeTar writes the checkpoint's files to w as a tar archive.
func (cp *checkpoint) writeTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	for _, p := range cp.files {
		if err := addFile(tw, cp.dir, p); err != nil {
			return err
		}
	}
	return tw.Close()
}

// snapshot takes a checkpoint and opens it as a tar stream, written as
// it is read; closing the stream removes the checkpoint.
func (s *Server) snapshot() (*grpcapi.Archive, error) {
	cp, err := s.takeCheckpoint()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(cp.writeTar(pw)) }()
	c := cp.contents
	return &grpcapi.Archive{
		ReadCloser: archiveStream{pr, cp},
		Size:       cp.total,
		Revision:   c.Revision, CompactRevision: c.CompactRevision, AppliedIndex: c.AppliedIndex, KeyCount: c.KeyCount,
	}, nil
}

// archiveStream is a checkpoint's tar stream.
type archiveStream struct {
	*io.PipeReader
	cp *checkpoint
}

func (a archiveStream) Close() error {
	err := a.PipeReader.Close()
	a.cp.remove()
	return err
}

func addFile(tw *tar.Writer, root, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	rel, _ := filepath.Rel(root, p)
	h, err := tar.FileInfoHeader(fi, "")
	if err != nil {
		return err
	}
	h.Name = rel
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// etcdSnapshot writes this node's replicated state, at one Pebble
// snapshot, as an etcd snapshot database (package etcdsnap) into a file
// in the data dir, and returns it open and already unlinked, so that it
// goes away when the stream ends however it ends.
func (s *Server) etcdSnapshot(context.Context) (io.ReadCloser, int64, error) {
	snap := s.store.DB().NewSnapshot()
	defer snap.Close()
	applied, err := storage.AppliedIndex(snap)
	if err != nil {
		return nil, 0, dkverr.New(dkverr.Internal, "read the applied index: %v", err)
	}
	path := filepath.Join(s.cfg.DataDir, "etcd-snapshot-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".db")
	if _, err := etcdsnap.Write(path, snap, etcdsnap.WriteOptions{ConsistentIndex: applied, Term: s.node.Status().Term}); err != nil {
		return nil, 0, dkverr.New(dkverr.Internal, "write the etcd snapshot: %v", err)
	}
	f, err := os.Open(path)
	os.Remove(path)
	if err != nil {
		return nil, 0, dkverr.New(dkverr.Internal, "etcd snapshot: %v", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, dkverr.New(dkverr.Internal, "etcd snapshot: %v", err)
	}
	return f, fi.Size(), nil
}
