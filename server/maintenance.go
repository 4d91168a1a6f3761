package server

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/backup/etcdsnap"
	"github.com/dkv-io/dkv/internal/backup/restore"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"google.golang.org/grpc"
)

// maintenanceService implements dkvpb.MaintenanceServer.
type maintenanceService struct {
	dkvpb.UnimplementedMaintenanceServer
	s *Server
}

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
	if err := s.store.DB().Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
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

// Snapshot streams a Pebble checkpoint of this node's database as a tar
// archive. The checkpoint is consistent (one point in time). The first
// message says what it holds, the last carries the SHA-256 of the blob.
func (m *maintenanceService) Snapshot(_ *dkvpb.SnapshotRequest, stream grpc.ServerStreamingServer[dkvpb.SnapshotResponse]) error {
	s := m.s
	cp, err := s.takeCheckpoint()
	if err != nil {
		return err
	}
	defer cp.remove()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(cp.writeTar(pw)) }()
	defer pr.Close()
	buf := make([]byte, 1<<20)
	var sent int64
	hdr := s.header(0)
	sum := sha256.New()
	first := true
	for {
		n, err := io.ReadFull(pr, buf)
		if n > 0 {
			sent += int64(n)
			remaining := uint64(0)
			if cp.total > sent {
				remaining = uint64(cp.total - sent)
			}
			sum.Write(buf[:n])
			resp := &dkvpb.SnapshotResponse{Header: hdr, Blob: buf[:n], RemainingBytes: max(remaining, 1)}
			if first {
				m.describe(resp, cp)
				first = false
			}
			if serr := stream.Send(resp); serr != nil {
				return serr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			last := &dkvpb.SnapshotResponse{Header: hdr, RemainingBytes: 0, Sha256: sum.Sum(nil)}
			if first {
				m.describe(last, cp)
			}
			return stream.Send(last)
		}
		if err != nil {
			return dkverr.New(dkverr.Internal, "snapshot stream: %v", err)
		}
	}
}

func (m *maintenanceService) describe(resp *dkvpb.SnapshotResponse, cp *checkpoint) {
	resp.Revision = cp.contents.Revision
	resp.CompactRevision = cp.contents.CompactRevision
	resp.AppliedIndex = cp.contents.AppliedIndex
	resp.KeyCount = cp.contents.KeyCount
	resp.MemberId = m.s.memberID
	resp.MemberName = m.s.cfg.Name
	resp.ClusterId = m.s.clusterID
	resp.Version = Version
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
