package server

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
)

// maintenanceService implements dkvpb.MaintenanceServer.
type maintenanceService struct {
	dkvpb.UnimplementedMaintenanceServer
	s *Server
}

// Snapshot streams a Pebble checkpoint of this node's database as a tar
// archive. The checkpoint is consistent (one point in time) and is taken
// into the data dir so it hard-links rather than copies table files.
func (m *maintenanceService) Snapshot(_ *dkvpb.SnapshotRequest, stream grpc.ServerStreamingServer[dkvpb.SnapshotResponse]) error {
	dir := filepath.Join(m.s.cfg.DataDir, "snapshot-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := m.s.store.DB().Checkpoint(dir); err != nil {
		return dkverr.New(dkverr.Internal, "checkpoint: %v", err)
	}
	defer os.RemoveAll(dir)

	var files []string
	var total int64
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		files = append(files, p)
		total += fi.Size() + 1024 // tar header and padding, roughly
		return nil
	})
	if err != nil {
		return dkverr.New(dkverr.Internal, "walk checkpoint: %v", err)
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for _, p := range files {
			if err := addFile(tw, dir, p); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	defer pr.Close()
	buf := make([]byte, 1<<20)
	var sent int64
	hdr := m.s.header(0)
	for {
		n, err := io.ReadFull(pr, buf)
		if n > 0 {
			sent += int64(n)
			remaining := uint64(0)
			if total > sent {
				remaining = uint64(total - sent)
			}
			if serr := stream.Send(&dkvpb.SnapshotResponse{Header: hdr, Blob: buf[:n], RemainingBytes: remaining}); serr != nil {
				return serr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return stream.Send(&dkvpb.SnapshotResponse{Header: hdr, RemainingBytes: 0})
		}
		if err != nil {
			return dkverr.New(dkverr.Internal, "snapshot stream: %v", err)
		}
	}
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
