package cli_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/dkv-io/dkv/internal/cli/clitest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The operator commands of issue #21 as a shell user sees them.
func TestCLIOperations(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	for _, k := range []string{"a", "b", "c"} {
		n.OK("", "put", k, "v-"+k)
	}

	t.Run("status shows the in-use size and the alarms", func(t *testing.T) {
		n := with(n, t)
		got := n.OK("", "status")
		if !regexp.MustCompile(`(?m)^db size in use: +[0-9.]+ (bytes|KiB|MiB|GiB)`).MatchString(got) {
			t.Errorf("status has no in-use size:\n%s", got)
		}
		if !regexp.MustCompile(`(?m)^alarms: +none$`).MatchString(got) {
			t.Errorf("status does not say there are no alarms:\n%s", got)
		}
		if got := n.OK("", "alarm", "list"); got != "no alarms\n" {
			t.Errorf("alarm list = %q, want %q", got, "no alarms\n")
		}
		if got := n.OK("", "alarm", "disarm"); got != "no alarms\n" {
			t.Errorf("alarm disarm = %q", got)
		}
		n.Fails(2, "Error: usage: --alarm \"FULL\" is not NOSPACE or CORRUPT", "alarm", "disarm", "--alarm", "FULL")
	})

	t.Run("defrag reports the size before and after", func(t *testing.T) {
		n := with(n, t)
		got := n.OK("", "defrag")
		if !regexp.MustCompile(`^127\.0\.0\.1:[0-9]+: defragmented: db size [0-9.]+ \S+ -> [0-9.]+ \S+ in [0-9]+ms\n$`).MatchString(got) {
			t.Errorf("defrag printed %q", got)
		}
	})

	t.Run("snapshot save, status, restore", func(t *testing.T) {
		n := with(n, t)
		dir := t.TempDir()
		file := filepath.Join(dir, "b.snap")
		got := n.OK("", "snapshot", "save", file)
		if strings.Contains(got, "\r") {
			t.Errorf("save drew a progress bar into a pipe: %q", got)
		}
		if !regexp.MustCompile(`^saved .*b\.snap: revision 4, 3 keys, .* from member default \([0-9]+\) of cluster [0-9]+, verified sha256 [0-9a-f]{64}\n$`).MatchString(got) {
			t.Errorf("save printed %q", got)
		}
		st := n.OK("", "snapshot", "status", file)
		for _, want := range []string{`(?m)^revision: +4$`, `(?m)^key count: +3$`, `(?m)^checksum: +sha256 [0-9a-f]{64} \(verified\)$`, `(?m)^cluster id: +[0-9]+$`, `(?m)^size: +[0-9.]+ KiB`} {
			if !regexp.MustCompile(want).MatchString(st) {
				t.Errorf("snapshot status lacks %s:\n%s", want, st)
			}
		}
		n.Fails(2, "Error: usage: "+file+" already exists", "snapshot", "save", file)

		data := filepath.Join(dir, "restored")
		ic := "r1=127.0.0.1:1"
		out := n.OK("", "snapshot", "restore", file, "--data-dir", data, "--name", "r1", "--initial-cluster", ic)
		if !strings.HasPrefix(out, "restored revision 4 (3 keys) into "+data+" as member r1 of new cluster ") {
			t.Errorf("restore printed %q", out)
		}
		n.Fails(1, "Error: data dir "+data+" is not empty", "snapshot", "restore", file, "--data-dir", data, "--name", "r1", "--initial-cluster", ic)
		n.Fails(2, "Error: usage: snapshot restore needs --data-dir, --name and --initial-cluster", "snapshot", "restore", file, "--data-dir", filepath.Join(dir, "x"))

		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		cut := filepath.Join(dir, "cut.snap")
		if err := os.WriteFile(cut, b[:len(b)-100], 0o600); err != nil {
			t.Fatal(err)
		}
		n.Fails(11, "Error: DataDamaged: backup file "+cut+" is damaged: it does not end with", "snapshot", "status", cut)
		b[100] ^= 1
		flipped := filepath.Join(dir, "flipped.snap")
		if err := os.WriteFile(flipped, b, 0o600); err != nil {
			t.Fatal(err)
		}
		n.Fails(11, "Error: DataDamaged: backup file "+flipped+" is damaged: checksum mismatch", "snapshot", "status", flipped)
		n.Fails(11, "Error: DataDamaged: backup file "+flipped+" is damaged: checksum mismatch", "snapshot", "restore", flipped, "--data-dir", filepath.Join(dir, "y"), "--name", "r1", "--initial-cluster", ic)
		if _, err := os.Stat(filepath.Join(dir, "y")); err == nil {
			t.Errorf("a refused restore left a data dir behind")
		}
	})

	t.Run("snapshot restore --from-etcd", func(t *testing.T) {
		n := with(n, t)
		dir := t.TempDir()
		// An etcd snapshot, as etcdctl snapshot save stores it: what
		// etcd's Maintenance.Snapshot streams, here DKV's own.
		conn, err := grpc.NewClient(n.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ss, err := etcdserverpb.NewMaintenanceClient(conn).Snapshot(t.Context(), &etcdserverpb.SnapshotRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var blob []byte
		for {
			r, err := ss.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			blob = append(blob, r.Blob...)
		}
		file := filepath.Join(dir, "etcd.db")
		if err := os.WriteFile(file, blob, 0o600); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(dir, "restored")
		ic := "r1=127.0.0.1:1"
		out := n.OK("", "snapshot", "restore", "--from-etcd", file, "--data-dir", data, "--name", "r1", "--initial-cluster", ic)
		if !strings.HasPrefix(out, "restored etcd snapshot at revision 4 (3 keys, 3 versions from compact revision 0, 0 leases) into "+data+" as member r1 of new cluster ") {
			t.Errorf("restore --from-etcd printed %q", out)
		}
		n.Fails(2, "Error: usage: snapshot restore needs one file", "snapshot", "restore", file, "--from-etcd", file, "--data-dir", filepath.Join(dir, "x"), "--name", "r1", "--initial-cluster", ic)
		backupFile := filepath.Join(dir, "b.snap")
		n.OK("", "snapshot", "save", backupFile)
		n.Fails(1, "Error: "+backupFile+": not an etcd snapshot: it is a DKV backup", "snapshot", "restore", "--from-etcd", backupFile, "--data-dir", filepath.Join(dir, "x"), "--name", "r1", "--initial-cluster", ic)
		blob[len(blob)/2] ^= 1
		flipped := filepath.Join(dir, "flipped.db")
		if err := os.WriteFile(flipped, blob, 0o600); err != nil {
			t.Fatal(err)
		}
		n.Fails(11, "Error: DataDamaged: "+flipped+": etcd snapshot is damaged: checksum mismatch", "snapshot", "restore", "--from-etcd", flipped, "--data-dir", filepath.Join(dir, "y"), "--name", "r1", "--initial-cluster", ic)
		if ents, _ := os.ReadDir(filepath.Join(dir, "y")); len(ents) > 0 {
			t.Errorf("a refused restore left %d entries in the data dir", len(ents))
		}
	})

	t.Run("snapshot save draws its progress bar on a terminal", func(t *testing.T) {
		n := with(n, t)
		file := filepath.Join(t.TempDir(), "tty.snap")
		cmd := exec.Command(clitest.Bin, "--timeout", "10s", "--endpoints", n.Addr, "snapshot", "save", file)
		ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 100})
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		var buf bytes.Buffer
		done := make(chan struct{})
		go func() { io.Copy(&buf, ptmx); close(done) }()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("snapshot save under a pty: %v\n%s", err, buf.String())
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		got := buf.String()
		t.Logf("terminal output: %q", got)
		bar := regexp.MustCompile(`\r *[0-9]+% \[[= >]+\]  [0-9.]+ (B|KiB|MiB) / [0-9.]+ (B|KiB|MiB)  [0-9.]+ (B|KiB|MiB)/s  ETA \S+`)
		if !bar.MatchString(got) {
			t.Errorf("no progress bar (percent, bar, bytes of total, rate, ETA) on the terminal: %q", got)
		}
		if !strings.Contains(got, "saved "+file+": revision 4") {
			t.Errorf("no summary after the bar: %q", got)
		}
		for _, line := range strings.Split(got, "\r") {
			if strings.HasPrefix(line, "saved ") {
				continue // the summary may wrap
			}
			if len(line) > 99 {
				t.Errorf("a bar line is wider than the 100-column terminal: %q", line)
			}
		}
	})

	t.Run("json forms", func(t *testing.T) {
		n := with(n, t)
		var st struct {
			DBSizeInUse int64 `json:"db_size_in_use"`
			Alarms      []any `json:"alarms"`
		}
		if err := json.Unmarshal([]byte(n.OK("", "-o", "json", "status")), &st); err != nil || st.Alarms == nil {
			t.Errorf("status -o json: %+v %v; want db_size_in_use and an alarms list", st, err)
		}
		var hs []struct {
			Hash     string `json:"hash"`
			Revision int64  `json:"revision"`
		}
		if err := json.Unmarshal([]byte(n.OK("", "-o", "json", "endpoint", "hashkv", "--rev", "2")), &hs); err != nil || len(hs) != 1 || hs[0].Revision != 2 || hs[0].Hash == "" {
			t.Errorf("endpoint hashkv --rev 2 -o json: %+v %v", hs, err)
		}
		if got := n.OK("", "-o", "json", "alarm", "list"); got != "[]\n" {
			t.Errorf("alarm list -o json = %q, want []", got)
		}
	})
}
