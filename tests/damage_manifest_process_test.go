package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// currentManifest is the MANIFEST Pebble's marker file names as current.
func (n *damageNode) currentManifest() string {
	n.t.Helper()
	markers, _ := filepath.Glob(filepath.Join(n.Dir, "marker.manifest.*"))
	best := ""
	for _, m := range markers {
		if filepath.Base(m) > filepath.Base(best) {
			best = m
		}
	}
	i := strings.Index(filepath.Base(best), "MANIFEST-")
	if i < 0 {
		n.t.Fatalf("no manifest marker in %s", n.Dir)
	}
	return filepath.Join(n.Dir, filepath.Base(best)[i:])
}

// storedTwice writes keys, stops cleanly, restarts (the WAL is flushed
// into an SST and the MANIFEST records it), writes more and stops
// cleanly again: a data dir whose MANIFEST and SSTs hold the raft log.
func storedTwice(t *testing.T, ctx context.Context) (*damageNode, []string) {
	n := newDamageNode(t)
	var acked []string
	for range 2 {
		n.start()
		if !n.waitReadyOrExit(60 * time.Second) {
			t.Fatalf("node exited:\n%s", n.output())
		}
		acked = append(acked, n.writeAckedKeys(ctx, damageKeys)...)
		n.stop(syscall.SIGTERM)
		if code := n.Cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("clean stop exit code %d:\n%s", code, n.output())
		}
	}
	return n, acked
}

// wantLastGood asserts the refusal says how far the log is known good.
func (n *damageNode) wantLastGood() {
	n.t.Helper()
	out := n.output()
	if !strings.Contains(out, "last good raft index") && !strings.Contains(out, "last raft index") {
		n.t.Errorf("the refusal does not say the last good raft index:\n%s", out)
	}
}

func manifestTest(t *testing.T, damage func(t *testing.T, path string)) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, acked := storedTwice(t, ctx)
	m := n.currentManifest()
	damage(t, m)
	n.wantRefused(ctx, acked, filepath.Base(m))
	n.wantLastGood()
}

// flip2At inverts 2 bytes at num/den of the file.
func flip2At(t *testing.T, path string, num, den int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := len(b) * num / den
	b[at] ^= 0xff
	b[at+1] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Two bytes flipped in the middle of the current MANIFEST: the node used
// to panic at start ("missing log entry [last: 0, append at: ...]", exit
// 2); it must refuse with DataDamaged, naming the MANIFEST.
func TestProcessFlippedManifestRefused(t *testing.T) {
	manifestTest(t, func(t *testing.T, path string) { flip2At(t, path, 1, 2) })
}

// The current MANIFEST cut to half its length: same.
func TestProcessTruncatedManifestRefused(t *testing.T) {
	manifestTest(t, truncateHalf)
}

// An SST cut to half its length: the node used to exit 1 with Pebble's
// "object size mismatch" and no guidance; it must refuse with
// DataDamaged, naming the SST.
func TestProcessTruncatedSSTRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, acked := storedTwice(t, ctx)
	ssts, _ := filepath.Glob(filepath.Join(n.Dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no SST")
	}
	truncateHalf(t, ssts[0])
	n.wantRefused(ctx, acked, filepath.Base(ssts[0]))
	n.wantLastGood()
}
