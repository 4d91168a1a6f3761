package servercmd_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/cli/clitest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// diskUsage is what the files under dir take on disk: allocated blocks,
// preallocation included, as du counts them.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stopServe ends a dkv serve with SIGTERM, as an operator would.
func stopServe(t *testing.T, p interface{ Signal(os.Signal) error }, exited chan struct{}) {
	t.Helper()
	p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop within 20s of SIGTERM")
	}
}

// A single node holding a dozen keys takes a few MB, not the 135 MB of a
// fixed 64 MiB memtable's preallocated write-ahead log plus a 64 MiB
// ballast, nor the 17 MB of a ballast the memtable's size.
func TestFootprintOfASmallStore(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	cmd, addr, exited, stderr := serveProc(t, data)
	if addr == "" {
		t.Fatalf("serve exited at start:\n%s", stderr)
	}
	for i := range 12 {
		if c, out := runDKVAt(addr, "put", fmt.Sprintf("key-%d", i), fmt.Sprintf("value-%d", i)); c != 0 {
			t.Fatalf("put: exit %d %s", c, out)
		}
	}
	stopServe(t, cmd.Process, exited)
	_, addr, _, stderr = serveProc(t, data)
	if addr == "" {
		t.Fatalf("serve did not start again:\n%s", stderr)
	}
	// The ballast is (re)made by the space monitor once it has measured
	// room; the footprint counts it.
	ballast := filepath.Join(data, "DKV_BALLAST")
	testutil.Eventually(t, 20*time.Second, "the ballast file is in place", func() bool {
		_, err := os.Stat(ballast)
		return err == nil
	})
	if c, out := runDKVAt(addr, "get", "key-11"); c != 0 || strings.TrimSpace(out) != "value-11" {
		t.Fatalf("get after restart: exit %d %q", c, out)
	}
	const limit = 20 << 20
	n := diskUsage(t, data)
	if n > limit {
		t.Fatalf("a node with 12 keys takes %.1f MiB on disk after a restart, want at most %d MiB", float64(n)/(1<<20), limit>>20)
	}
	// The ballast is the largest request the node accepts
	// (--max-value-bytes, 1 MiB, plus 4 MiB of envelope), not a memtable
	// (16 MiB at least, six times the live data of a member holding
	// 10,000 values of 256 bytes); the rest, with 12 keys, is Pebble's
	// files and the raft log's segments (512 KiB preallocated each: one
	// from before the restart, one cut by it).
	fi, err := os.Stat(ballast)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(5 << 20); fi.Size() != want {
		t.Errorf("the ballast is %.1f MiB, want %.1f MiB: the largest request", float64(fi.Size())/(1<<20), float64(want)/(1<<20))
	}
	if rest := n - fi.Size(); rest > 2<<20 {
		t.Errorf("besides the ballast a node with 12 keys takes %.1f MiB, want at most 2 MiB", float64(rest)/(1<<20))
	}
}

// On a 400 MiB filesystem the NOSPACE alarm fires once data fills it, not
// preallocation: with a 128 MiB reserve, a 64 MiB ballast and a 70 MiB
// preallocated write-ahead log, 20 MiB of values were all it took.
func TestNoSpaceOnASmallFilesystemIsData(t *testing.T) {
	mnt := mountTmpfs(t, "400m")
	data := filepath.Join(mnt, "data")
	cmd, addr, exited, stderr := serveProc(t, data)
	if addr == "" {
		t.Fatalf("serve exited at start:\n%s", stderr)
	}
	// Filled through one client: a dkv process per put took most of the
	// time (with the race detector, more than the deadline allowed once
	// the store took more data before NoSpace).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{addr}, DialTimeout: 10 * time.Second, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw := make([]byte, 675_000)
	var acked int
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; time.Now().Before(deadline) && i < 1000; i++ {
		rand.Read(raw) // incompressible: the engine compresses tables
		val := base64.StdEncoding.EncodeToString(raw)
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = c.Put(pctx, fmt.Sprintf("k%04d", i), []byte(val))
		pcancel()
		if err != nil {
			break
		}
		acked += len(val)
	}
	if !errors.Is(err, client.ErrNoSpace) {
		t.Fatalf("filling the disk: after %.1f MiB of values the last put returned %v, want NoSpace (stderr:\n%s)", float64(acked)/(1<<20), err, clitest.Tail(stderr.String(), 2000))
	}
	// The CLI says so too.
	if code, out := runDKVAtIn(addr, "v", "put", "one-more", "-"); code != 10 || !strings.HasPrefix(out, "Error: NoSpace:") {
		t.Fatalf("dkv put on the full disk: exit %d %q, want exit 10 Error: NoSpace", code, out)
	}
	// Each value is in the raft log, the latest record and the history
	// until compaction (docs/architecture.md): a third of what is left
	// after the reserve is what a user can expect today.
	const want = 80 << 20
	t.Logf("%.1f MiB of values accepted before NoSpace", float64(acked)/(1<<20))
	if acked < want {
		t.Fatalf("NoSpace after %.1f MiB of values on a 400 MiB filesystem, want at least %d MiB", float64(acked)/(1<<20), want>>20)
	}
	stopServe(t, cmd.Process, exited)
}
