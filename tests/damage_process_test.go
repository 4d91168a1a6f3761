package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

// exitDataDamaged is dkv serve's exit code for damaged data (docs/cli.md).
const exitDataDamaged = 11

// damageNode is one single-node `dkv serve` process whose data dir the test
// damages between runs.
type damageNode struct {
	t *testing.T
	*testutil.Member
}

func newDamageNode(t *testing.T) *damageNode {
	base := t.TempDir()
	m := &testutil.Member{Name: "n1", ClientAddr: testutil.FreeAddr(t), PeerAddr: testutil.FreeAddr(t),
		Dir: filepath.Join(base, "data"), FreshLog: true}
	m.Args = []string{"serve", "--name", m.Name, "--client-addr", m.ClientAddr, "--peer-addr", m.PeerAddr,
		"--http-addr", "", "--data-dir", m.Dir}
	n := &damageNode{t: t, Member: m}
	t.Cleanup(func() {
		if n.Process != nil {
			n.Kill()
		}
	})
	return n
}

// start runs the node again; its log holds this run's output only.
func (n *damageNode) start() {
	n.t.Helper()
	n.Start(n.t)
}

func (n *damageNode) output() string {
	b, _ := os.ReadFile(n.Log)
	return string(b)
}

// waitReadyOrExit waits until the process prints "ready" (true) or exits
// (false).
func (n *damageNode) waitReadyOrExit(timeout time.Duration) bool {
	n.t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.Exited():
			return false
		case <-deadline:
			n.t.Fatalf("node neither ready nor exited after %v:\n%s", timeout, n.output())
		case <-tick.C:
			if strings.Contains(n.output(), "\nready\n") {
				return true
			}
		}
	}
}

func (n *damageNode) stop(sig syscall.Signal) {
	n.Cmd.Process.Signal(sig)
	select {
	case <-n.Exited():
	case <-time.After(30 * time.Second):
		n.t.Fatalf("node did not exit after %v", sig)
	}
}

func (n *damageNode) dial(ctx context.Context) *client.Client {
	n.t.Helper()
	c, err := client.New(ctx, client.Config{Endpoints: []string{n.ClientAddr}, DialTimeout: 5 * time.Second, AutoSyncInterval: -1})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// writeAckedKeys writes n keys with a few writers and returns those
// acknowledged.
func (n *damageNode) writeAckedKeys(ctx context.Context, count int) []string {
	n.t.Helper()
	c := n.dial(ctx)
	defer c.Close()
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	const writers = 8
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < count; i += writers {
				k := fmt.Sprintf("k/%06d", i)
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := c.Put(wctx, k, []byte(strings.Repeat("v", 100)+k))
				cancel()
				if err != nil {
					n.t.Errorf("put %s: %v", k, err)
					return
				}
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n.t.Failed() {
		n.t.FailNow()
	}
	return acked
}

func (n *damageNode) missing(ctx context.Context, keys []string) int {
	n.t.Helper()
	c := n.dial(ctx)
	defer c.Close()
	res, err := c.Range(ctx, "k/", client.WithPrefix())
	if err != nil {
		n.t.Fatal(err)
	}
	have := map[string]bool{}
	for _, kv := range res.KVs {
		have[string(kv.Key)] = true
	}
	miss := 0
	for _, k := range keys {
		if !have[k] {
			miss++
		}
	}
	return miss
}

func (n *damageNode) newest(glob string) string {
	n.t.Helper()
	fs, _ := filepath.Glob(filepath.Join(n.Dir, glob))
	if len(fs) == 0 {
		n.t.Fatalf("no %s in %s", glob, n.Dir)
	}
	sort.Strings(fs)
	return fs[len(fs)-1]
}

// wantRefused asserts the node exits with the damaged-data code and a
// message naming file (a substring), without a Go stack trace.
func (n *damageNode) wantRefused(ctx context.Context, acked []string, file string) {
	n.t.Helper()
	n.start()
	if n.waitReadyOrExit(60 * time.Second) {
		miss := n.missing(ctx, acked)
		n.t.Fatalf("node started on damaged data: ready with %d of %d acknowledged keys missing\n%s", miss, len(acked), n.output())
	}
	out := n.output()
	if code := n.Cmd.ProcessState.ExitCode(); code != exitDataDamaged {
		n.t.Errorf("exit code %d, want %d (DataDamaged)\n%s", code, exitDataDamaged, out)
	}
	for _, want := range []string{"Error: DataDamaged: data dir " + n.Dir + " is damaged", file, "docs/cluster.md", "remove it from the cluster"} {
		if !strings.Contains(out, want) {
			n.t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"panic", "goroutine "} {
		if strings.Contains(out, bad) {
			n.t.Errorf("output has %q (a crash, not a clean refusal):\n%s", bad, out)
		}
	}
	n.t.Logf("refused as expected:\n%s", out)
}

func truncateHalf(t *testing.T, path string) {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

func flip8Middle(t *testing.T, path string) { flip8At(t, path, 1, 2) }

// flip8At inverts 8 bytes at num/den of the file.
func flip8At(t *testing.T, path string, num, den int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := len(b) * num / den
	for i := at; i < at+8 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// flip8FromEnd inverts 8 bytes starting back bytes before path's end.
func flip8FromEnd(t *testing.T, path string, back int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) - back; i < len(b)-back+8 && i >= 0; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

const damageKeys = 3000

func damageTest(t *testing.T, damage func(n *damageNode) string) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := newDamageNode(t)
	n.start()
	if !n.waitReadyOrExit(60 * time.Second) {
		t.Fatalf("fresh node exited:\n%s", n.output())
	}
	acked := n.writeAckedKeys(ctx, damageKeys)
	n.stop(syscall.SIGKILL)
	file := damage(n)
	n.wantRefused(ctx, acked, file)
}

// raftLogGlob matches the raft log's segment files (storage format 2).
const raftLogGlob = "raftlog/*.rlog"

// After kill -9, the newest raft log segment cut to half its length: the
// node must refuse to start (it used to come up ready with acknowledged
// keys gone).
func TestProcessTruncatedWALRefused(t *testing.T) {
	damageTest(t, func(n *damageNode) string {
		wal := n.newest(raftLogGlob)
		truncateHalf(t, wal)
		return filepath.Base(wal)
	})
}

// After kill -9, eight bytes flipped in the middle of the newest raft log
// segment.
func TestProcessFlippedWALRefused(t *testing.T) {
	damageTest(t, func(n *damageNode) string {
		wal := n.newest(raftLogGlob)
		flip8Middle(t, wal)
		return filepath.Base(wal)
	})
}

// An undamaged restart after kill -9 keeps every acknowledged key; then,
// with the data in SSTs, bytes flipped in an SST make the next start a
// clean refusal naming it (it used to be a Go panic with a stack trace).
func TestProcessUndamagedRestartThenFlippedSSTRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := newDamageNode(t)
	n.start()
	if !n.waitReadyOrExit(60 * time.Second) {
		t.Fatalf("fresh node exited:\n%s", n.output())
	}
	acked := n.writeAckedKeys(ctx, damageKeys)
	n.stop(syscall.SIGKILL)

	n.start() // replays the WAL into an SST
	if !n.waitReadyOrExit(60 * time.Second) {
		t.Fatalf("undamaged restart after kill -9 exited:\n%s", n.output())
	}
	if miss := n.missing(ctx, acked); miss != 0 {
		t.Fatalf("undamaged restart lost %d of %d acknowledged keys", miss, len(acked))
	}
	n.stop(syscall.SIGTERM)
	if code := n.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("clean stop exit code %d:\n%s", code, n.output())
	}

	ssts, _ := filepath.Glob(filepath.Join(n.Dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no SST after restart")
	}
	biggest, size := "", int64(-1)
	for _, f := range ssts {
		if fi, err := os.Stat(f); err == nil && fi.Size() > size {
			biggest, size = f, fi.Size()
		}
	}
	// The table's footer (its last 53 bytes or more: where its index and
	// properties are), which every read of the table starts from: the
	// start reads the applied index, whose key the table's range covers.
	// (Before storage format 2 the raft log, read at every start, filled
	// the table's first half and bytes flipped a quarter in were found.)
	flip8At(t, biggest, 1, 4)
	flip8FromEnd(t, biggest, 24)
	n.wantRefused(ctx, acked, filepath.Base(biggest))
}

// A cluster member whose WAL lost everything (its log and HardState) must
// not come back as a blank member that may vote a second time in a term
// it already voted in: it refuses to start. It used to bootstrap again.
func TestProcessMemberWithLostLogRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ms := startProcCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 50; i++ {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cl.Put(wctx, fmt.Sprintf("k/%d", i), []byte("v"))
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var victim *testutil.Member
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool { return leaderOf(ctx, ms) != nil })
	l := leaderOf(ctx, ms)
	for _, m := range ms {
		if m != l {
			victim = m
			break
		}
	}
	victim.Kill()
	logs, _ := filepath.Glob(filepath.Join(victim.Dir, raftLogGlob))
	if len(logs) == 0 {
		t.Fatal("no raft log segment")
	}
	for _, f := range logs {
		if err := os.Truncate(f, 0); err != nil {
			t.Fatal(err)
		}
	}
	victim.Start(t)
	select {
	case <-victim.Exited():
	case <-time.After(30 * time.Second):
		out, _ := os.ReadFile(victim.Log)
		t.Fatalf("member with a lost log and HardState kept running:\n%s", out)
	}
	out, _ := os.ReadFile(victim.Log)
	if code := victim.Cmd.ProcessState.ExitCode(); code != exitDataDamaged {
		t.Errorf("exit code %d, want %d\n%s", code, exitDataDamaged, out)
	}
	for _, want := range []string{"the raft log and HardState are gone", "remove it from the cluster"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "goroutine ") {
		t.Errorf("a stack trace:\n%s", out)
	}
}

// An SST damaged while the node runs: the first read of a damaged block
// stops the node with the damaged-data exit code and message (it used to
// be a Go panic with a stack trace), and the read is not answered.
func TestProcessSSTDamagedWhileRunningStops(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n := newDamageNode(t)
	n.start()
	if !n.waitReadyOrExit(60 * time.Second) {
		t.Fatalf("fresh node exited:\n%s", n.output())
	}
	acked := n.writeAckedKeys(ctx, damageKeys)
	n.stop(syscall.SIGTERM)
	n.start() // the WAL is replayed into an SST
	if !n.waitReadyOrExit(60 * time.Second) {
		t.Fatalf("restart exited:\n%s", n.output())
	}
	ssts, _ := filepath.Glob(filepath.Join(n.Dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no SST after restart")
	}
	// The table holds the state only (the raft log is in raftlog/):
	// the keys' history records ("s/mh/...") first, then the counters,
	// the change log and the members. Blocks all through it are damaged,
	// the keys' among them; the keys were not read since the start.
	for _, f := range ssts {
		for _, at := range []int{1, 2, 3, 5, 6, 7} {
			flip8At(t, f, at, 8)
		}
	}
	c := n.dial(ctx)
	defer c.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := c.Range(rctx, "k/", client.WithPrefix(), client.WithSerializable())
	rcancel()
	if err == nil {
		t.Errorf("range over a damaged SST answered %d of %d keys without an error", len(res.KVs), len(acked))
	}
	select {
	case <-n.Exited():
	case <-time.After(30 * time.Second):
		t.Fatalf("node still running after reading a damaged SST (range err %v):\n%s", err, n.output())
	}
	out := n.output()
	if code := n.Cmd.ProcessState.ExitCode(); code != exitDataDamaged {
		t.Errorf("exit code %d, want %d (DataDamaged)\n%s", code, exitDataDamaged, out)
	}
	for _, want := range []string{"Error: DataDamaged: data dir " + n.Dir + " is damaged", ".sst", "docs/cluster.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"panic", "goroutine "} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q (a crash, not a clean stop):\n%s", bad, out)
		}
	}
	t.Logf("range error: %v\n%s", err, out)
}
