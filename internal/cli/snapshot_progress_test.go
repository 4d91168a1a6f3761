package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// 'dkv snapshot save' of a store of many large values, under a pty as an
// operator runs it: the bar shows percent, bytes of the total, rate and
// ETA, redraws as bytes arrive, is cleared for the summary (with the
// throughput), and the file verifies with 'dkv snapshot status'. The
// normal suite loads 16 MiB; DKV_BIG_SNAPSHOT=1 loads 1 GiB (issue #21's
// demonstration, run by hand; see BENCHMARKS.md).
func TestSnapshotSaveProgressOfALargeStore(t *testing.T) {
	load := int64(16 << 20)
	if os.Getenv("DKV_BIG_SNAPSHOT") == "1" {
		load = 1 << 30
	}
	const valueSize = 512 << 10
	n := clitest.StartServe(t, t.TempDir())
	keys := int(load / valueSize)
	loadStart := time.Now()
	loadValues(t, n.Addr, keys, valueSize)
	t.Logf("loaded %d values of %d KiB (%d MiB) in %v", keys, valueSize>>10, load>>20, time.Since(loadStart).Round(time.Millisecond))

	file := filepath.Join(t.TempDir(), "big.snap")
	cmd := exec.Command(clitest.Bin, "--timeout", "10m", "--endpoints", n.Addr, "snapshot", "save", file)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var buf bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&buf, ptmx); close(copied) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("snapshot save under a pty: %v\n%q", err, clitest.Tail(buf.String(), 2000))
	}
	select { // the pty's last bytes after the exit
	case <-copied:
	case <-time.After(5 * time.Second):
	}
	got := buf.String()

	bar := regexp.MustCompile(`^ *([0-9]+)% \[[= >]+\]  ([0-9.]+) (B|KiB|MiB|GiB) / ([0-9.]+) (B|KiB|MiB|GiB)  [0-9.]+ (B|KiB|MiB|GiB)/s  ETA \S+$`)
	var bars []string
	var done []float64
	var summary string
	for _, line := range strings.Split(got, "\r") {
		line = strings.TrimRight(line, "\n")
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "saved "); ok {
			summary = "saved " + s
			continue
		}
		if m := bar.FindStringSubmatch(line); m != nil {
			bars = append(bars, line)
			done = append(done, inBytes(t, m[2], m[3]))
		}
		if len(line) > 99 {
			t.Errorf("a bar line is wider than the 100-column terminal: %q", line)
		}
	}
	if len(bars) == 0 {
		t.Fatalf("no progress bar (percent, bar, bytes of total, rate, ETA) on the terminal: %q", clitest.Tail(got, 2000))
	}
	for i := 1; i < len(done); i++ {
		if done[i] < done[i-1] {
			t.Errorf("the bar went back: %q then %q", bars[i-1], bars[i])
		}
	}
	if load >= 1<<30 && (len(bars) < 3 || done[len(done)-1] <= done[0]) {
		t.Errorf("a 1 GiB save drew %d bars without advancing: %q", len(bars), bars)
	}
	t.Logf("%d bar redraws; first %q; last %q", len(bars), bars[0], bars[len(bars)-1])
	sum := regexp.MustCompile(`^saved ` + regexp.QuoteMeta(file) + `: revision [0-9]+, ` + strconv.Itoa(keys) + ` keys, [0-9.]+ (MiB|GiB) \([0-9]+ bytes\) in \S+ \([0-9.]+ (KiB|MiB|GiB)/s\) from member`)
	if !sum.MatchString(summary) {
		t.Fatalf("summary %q; want the file, revision, %d keys, size, time and throughput", summary, keys)
	}
	t.Logf("summary: %s", summary)

	st := n.OK("", "snapshot", "status", file)
	for _, want := range []string{`(?m)^checksum: +sha256 [0-9a-f]{64} \(verified\)$`, `(?m)^key count: +` + strconv.Itoa(keys) + `$`} {
		if !regexp.MustCompile(want).MatchString(st) {
			t.Errorf("snapshot status lacks %s:\n%s", want, st)
		}
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < load {
		t.Errorf("the backup of %d bytes of values is %d bytes", load, fi.Size())
	}
}

// loadValues puts keys random (incompressible) values of size bytes with
// 8 writers.
func loadValues(t *testing.T, addr string, keys, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			val := make([]byte, size)
			for i := w; i < keys; i += 8 {
				rng.Read(val)
				if _, err := c.Put(ctx, fmt.Sprintf("big/%06d", i), val); err != nil {
					errc <- fmt.Errorf("put %d: %w", i, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

func inBytes(t *testing.T, num, unit string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v * map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
}
