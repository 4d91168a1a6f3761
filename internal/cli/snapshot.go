package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/backup"
	"github.com/spf13/cobra"
)

func (a *App) snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a member, check a backup, restore a backup into a new cluster",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Usagef("snapshot needs a subcommand: save, status, restore")
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Stream a consistent backup of the member at --endpoints into FILE",
		Long: `Stream a consistent backup (a Pebble checkpoint) of the one member at
--endpoints into FILE, with its revision, key count, member and cluster
and a SHA-256 checksum. The checksum the member computed while sending is
compared with the bytes received, and FILE is read back and verified
before the command succeeds. FILE appears only when complete (it is
written as FILE.part first); an existing FILE is refused. On a terminal
a progress bar shows bytes, rate and ETA. --timeout bounds connecting,
not the transfer; Ctrl-C stops it.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error { return a.snapshotSave(argv[0]) },
	}, &cobra.Command{
		Use:   "status FILE",
		Short: "Verify a backup file and print its revision, key count, size, checksum and cluster",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			meta, err := backup.Verify(argv[0])
			if err != nil {
				return err
			}
			return a.printBackup(argv[0], meta)
		},
	})
	return cmd
}

func (a *App) snapshotSave(path string) error {
	eps, err := a.endpointList()
	if err != nil {
		return err
	}
	if len(eps) != 1 {
		return Usagef("snapshot save backs up one member: give one endpoint in --endpoints (got %d)", len(eps))
	}
	if _, err := os.Lstat(path); err == nil {
		return Usagef("%s already exists; give a new file name", path)
	}
	cctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	c, err := a.newClient(cctx, false)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	meta, took, err := saveSnapshot(ctx, c, path, newProgress(a.stdout))
	if err != nil {
		return err
	}
	if a.JSON() {
		return WriteJSON(a.stdout, map[string]any{"file": path, "revision": meta.Revision, "key_count": meta.KeyCount,
			"bytes": meta.FileBytes, "sha256": meta.FileSHA256, "member_id": meta.MemberID, "member_name": meta.MemberName,
			"cluster_id": meta.ClusterID, "took_ms": took.Milliseconds()})
	}
	rate := float64(meta.FileBytes) / max(took.Seconds(), 1e-9)
	_, err = fmt.Fprintf(a.stdout, "saved %s: revision %d, %d keys, %s in %v (%s/s) from member %s (%s) of cluster %s, verified sha256 %s\n",
		path, meta.Revision, meta.KeyCount, humanBytes(meta.FileBytes), took.Round(time.Millisecond), shortBytes(int64(rate)),
		meta.MemberName, meta.MemberID, meta.ClusterID, meta.FileSHA256)
	return err
}

// saveSnapshot streams the backup into path, checks the member's
// checksum against the bytes received, and verifies the written file.
func saveSnapshot(ctx context.Context, c *client.Client, path string, prog *progress) (backup.Meta, time.Duration, error) {
	start := time.Now()
	st, err := c.Snapshot(ctx)
	if err != nil {
		return backup.Meta{}, 0, err
	}
	w, err := backup.Create(path)
	if err != nil {
		return backup.Meta{}, 0, err
	}
	fail := func(err error) (backup.Meta, time.Duration, error) {
		prog.clear()
		w.Abort()
		return backup.Meta{}, 0, err
	}
	var meta backup.Meta
	first := true
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return fail(fmt.Errorf("the member ended the backup stream after %d bytes without its final message: nothing was saved", w.DataBytes()))
		}
		if err != nil {
			return fail(fmt.Errorf("backup stream: %w", client.Classify(ctx, err)))
		}
		if first {
			first = false
			meta = backup.Meta{
				Revision: resp.GetRevision(), CompactRevision: resp.GetCompactRevision(), AppliedIndex: resp.GetAppliedIndex(),
				KeyCount: resp.GetKeyCount(), MemberID: strconv.FormatUint(resp.GetMemberId(), 10), MemberName: resp.GetMemberName(),
				ClusterID: strconv.FormatUint(resp.GetClusterId(), 10), ServerVersion: resp.GetVersion(), Created: time.Now().UTC(),
			}
		}
		if _, err := w.Write(resp.GetBlob()); err != nil {
			return fail(fmt.Errorf("write %s: %w", path, err))
		}
		prog.update(w.DataBytes(), int64(resp.GetRemainingBytes()))
		if resp.GetRemainingBytes() == 0 {
			if sum := resp.GetSha256(); len(sum) > 0 && !bytes.Equal(sum, w.DataSHA256()) {
				return fail(fmt.Errorf("%w: the %d bytes received have SHA-256 %x, the member sent %s: damaged in transit; nothing was saved",
					backup.ErrDamaged, w.DataBytes(), w.DataSHA256(), hex.EncodeToString(sum)))
			}
			break
		}
	}
	prog.clear()
	if err := w.Finish(meta); err != nil {
		return backup.Meta{}, 0, err
	}
	got, err := backup.Verify(path)
	if err != nil {
		return backup.Meta{}, 0, fmt.Errorf("reading %s back: %w", path, err)
	}
	return got, time.Since(start), nil
}

func (a *App) printBackup(path string, m backup.Meta) error {
	if a.JSON() {
		return WriteJSON(a.stdout, map[string]any{"file": path, "revision": m.Revision, "compact_revision": m.CompactRevision,
			"applied_index": m.AppliedIndex, "key_count": m.KeyCount, "bytes": m.FileBytes, "sha256": m.FileSHA256,
			"cluster_id": m.ClusterID, "member_id": m.MemberID, "member_name": m.MemberName, "created": m.Created,
			"server_version": m.ServerVersion})
	}
	_, err := fmt.Fprintf(a.stdout, "file:              %s\nchecksum:          sha256 %s (verified)\nsize:              %s\nrevision:          %d\ncompact revision:  %d\nkey count:         %d\ncluster id:        %s\nmember:            %s (%s)\ncreated:           %s\nserver version:    %s\n",
		path, m.FileSHA256, humanBytes(m.FileBytes), m.Revision, m.CompactRevision, m.KeyCount, m.ClusterID, m.MemberName, m.MemberID,
		m.Created.Format(time.RFC3339), m.ServerVersion)
	return err
}
