package cli_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
)

// dkvBin is the dkv binary built once by TestMain.
var dkvBin string

func TestMain(m *testing.M) {
	var err error
	if dkvBin, err = testutil.BuildDKV(raceEnabled); err != nil {
		fmt.Fprintf(os.Stderr, "building dkv: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// node is a running `dkv serve` process.
type node struct {
	t       *testing.T
	cmd     *exec.Cmd
	addr    string
	stdout  *lockedBuffer
	logPath string
	exited  chan struct{}
	exitErr error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNode runs dkv serve on free ports with its data in dir and waits
// until `dkv status` succeeds against it.
func startNode(t *testing.T, dir string, extra ...string) *node {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(dkvBin, append([]string{"serve", "--data-dir", dir,
		"--client-addr", "127.0.0.1:0", "--http-addr", "", "--peer-addr", ""}, extra...)...)
	cmd.Stderr = logf
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, cmd: cmd, stdout: &lockedBuffer{}, logPath: logPath, exited: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(n.stdout, line)
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), "client gRPC:"); ok {
				addrc <- strings.TrimSpace(a)
			}
		}
		n.exitErr = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			logs, _ := os.ReadFile(logPath)
			t.Logf("serve stdout:\n%s\nserve stderr (tail):\n%s", n.stdout, tail(string(logs), 3000))
		}
	})
	select {
	case n.addr = <-addrc:
	case <-n.exited:
		t.Fatalf("dkv serve exited before listening: %v", n.exitErr)
	case <-time.After(30 * time.Second):
		t.Fatal("dkv serve printed no client address within 30s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := n.dkv("", "status")
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dkv status never succeeded: %+v", r)
		}
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (n *node) kill() {
	n.cmd.Process.Kill()
	<-n.exited
}

type result struct {
	stdout, stderr string
	code           int
}

// dkv runs the CLI against n with stdin and args.
func (n *node) dkv(stdin string, args ...string) result {
	n.t.Helper()
	return n.run(nil, stdin, args...)
}

// dkvEnv is dkv with extra environment variables.
func (n *node) dkvEnv(env []string, args ...string) result {
	n.t.Helper()
	return n.run(env, "", args...)
}

func (n *node) run(env []string, stdin string, args ...string) result {
	n.t.Helper()
	cmd := exec.Command(dkvBin, append([]string{"--timeout", "10s"}, args...)...)
	cmd.Env = append(append(os.Environ(), "DKV_ENDPOINTS="+n.addr), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("running dkv %q: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// ok runs dkv and fails the test unless it exits 0; it returns stdout.
func (n *node) ok(stdin string, args ...string) string {
	n.t.Helper()
	r := n.dkv(stdin, args...)
	if r.code != 0 {
		n.t.Fatalf("dkv %q: exit %d, stderr %q", args, r.code, r.stderr)
	}
	return r.stdout
}

// fails runs dkv and checks the exit code and the stderr prefix.
func (n *node) fails(code int, stderrPrefix string, args ...string) result {
	n.t.Helper()
	r := n.dkv("", args...)
	if r.code != code || !strings.HasPrefix(r.stderr, stderrPrefix) {
		n.t.Fatalf("dkv %q: exit %d stderr %q; want exit %d stderr starting %q", args, r.code, r.stderr, code, stderrPrefix)
	}
	return r
}

func TestCLIEndToEnd(t *testing.T) {
	n := startNode(t, t.TempDir())

	if got := n.ok("", "put", "greeting", "hello"); got != "OK\n" {
		t.Fatalf("put printed %q", got)
	}
	if got := n.ok("", "get", "greeting"); got != "hello\n" {
		t.Fatalf("get printed %q, want the bare value", got)
	}
	// Values from stdin are taken byte for byte.
	n.ok("line1\nline2\n", "put", "multi", "-")
	if got := n.ok("", "get", "multi"); got != "line1\nline2\n\n" {
		t.Fatalf("stdin value read back as %q", got)
	}

	// History: every revision of a key stays readable with --rev.
	var revs []int64
	for _, v := range []string{"v1", "v2", "v3"} {
		out := n.ok("", "-o", "json", "put", "hist", v)
		var rev int64
		if _, err := fmt.Sscanf(out, `{"revision":%d}`, &rev); err != nil {
			t.Fatalf("put -o json printed %q: %v", out, err)
		}
		revs = append(revs, rev)
	}
	for i, rev := range revs {
		if got := n.ok("", "get", "hist", "--rev", strconv.FormatInt(rev, 10)); got != fmt.Sprintf("v%d\n", i+1) {
			t.Fatalf("get --rev %d printed %q", rev, got)
		}
	}
	if got := n.ok("", "-o", "json", "get", "hist"); !strings.Contains(got, `"key":"hist","value":"v3"`) || !strings.Contains(got, `"version":3`) {
		t.Fatalf("get -o json printed %q", got)
	}

	// Prefix listing, keys only, count.
	for _, k := range []string{"p/b", "p/a", "p/c"} {
		n.ok("", "put", k, "val-"+k)
	}
	if got := n.ok("", "get", "p/", "--prefix"); got != "p/a\nval-p/a\np/b\nval-p/b\np/c\nval-p/c\n" {
		t.Fatalf("get --prefix printed %q", got)
	}
	if got := n.ok("", "get", "p/", "--prefix", "--keys-only", "--limit", "2"); got != "p/a\np/b\n" {
		t.Fatalf("get --prefix --keys-only --limit 2 printed %q", got)
	}
	if got := n.ok("", "get", "p/", "--prefix", "--count"); got != "3\n" {
		t.Fatalf("get --count printed %q", got)
	}

	// Conditional puts and their exit codes.
	n.fails(4, "Error: Conflict: ", "put", "greeting", "again", "--if-absent")
	n.fails(4, "Error: Conflict: ", "put", "greeting", "again", "--if-version", "7")
	n.ok("", "put", "greeting", "hi", "--if-version", "1")
	if got := n.ok("", "put", "greeting", "hey", "--prev"); got != "OK\ngreeting\nhi\n" {
		t.Fatalf("put --prev printed %q", got)
	}

	// NotFound and InvalidInput.
	n.fails(3, `Error: NotFound: key "nope" not found`, "get", "nope")
	r := n.fails(6, "Error: InvalidInput: ", "put", strings.Repeat("k", 5000), "v")
	if !strings.Contains(r.stderr, "4096") && !strings.Contains(r.stderr, "4 KiB") {
		t.Fatalf("oversized key message does not name the limit: %q", r.stderr)
	}
	n.fails(2, "Error: usage: ", "put", "k")

	// Delete.
	if got := n.ok("", "del", "p/", "--prefix"); got != "3\n" {
		t.Fatalf("del --prefix printed %q", got)
	}
	if got := n.ok("", "del", "greeting", "--prev"); got != "1\ngreeting\nhey\n" {
		t.Fatalf("del --prev printed %q", got)
	}
	n.fails(3, "Error: NotFound: ", "get", "greeting")

	// Counter with bounds.
	if got := n.ok("", "counter", "add", "slots", "2", "--max", "3"); got != "2\n" {
		t.Fatalf("counter printed %q", got)
	}
	n.fails(4, "Error: Conflict: ", "counter", "add", "slots", "2", "--max", "3")
	if got := n.ok("", "counter", "add", "slots", "-2", "--min", "0"); got != "0\n" {
		t.Fatalf("counter -2 printed %q", got)
	}

	// A compare-and-swap txn from stdin, then the same from a file fails.
	n.ok("", "put", "a", "1")
	txn := `{"compare":[{"key":"a","target":"value","result":"equal","value":"1"}],
		"success":[{"put":{"key":"a","value":"2"}}],
		"failure":[{"get":{"key":"a"}}]}`
	if got := n.ok(txn, "txn"); got != "SUCCESS\nOK\n" {
		t.Fatalf("txn printed %q", got)
	}
	f := filepath.Join(t.TempDir(), "txn.json")
	if err := os.WriteFile(f, []byte(txn), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := n.ok("", "txn", f); got != "FAILURE\na\n2\n" {
		t.Fatalf("second txn printed %q", got)
	}
	if got := n.ok("", "-o", "json", "txn", f); !strings.HasPrefix(got, `{"succeeded":false,`) {
		t.Fatalf("txn -o json printed %q", got)
	}
	n.fails(2, "Error: usage: txn JSON", "txn", "/dev/null")

	// Compaction makes old revisions unreadable.
	n.ok("", "compact", strconv.FormatInt(revs[2], 10))
	n.fails(8, "Error: Compacted: ", "get", "hist", "--rev", strconv.FormatInt(revs[0], 10))

	if got := n.ok("", "status"); !strings.Contains(got, "leader:") {
		t.Fatalf("status printed %q", got)
	}
	if got := n.ok("", "-o", "json", "member", "list"); !strings.Contains(got, `"is_leader":true`) {
		t.Fatalf("member list printed %q", got)
	}
}

// SIGTERM stops dkv serve cleanly, with exit status 0.
func TestServeStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir)
	n.ok("", "put", "k", "v")
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("dkv serve still running 30s after SIGTERM")
	}
	if n.exitErr != nil {
		t.Fatalf("dkv serve exited with %v after SIGTERM", n.exitErr)
	}
	if !strings.Contains(n.stdout.String(), "stopped") {
		t.Fatalf("no clean-stop message in %q", n.stdout)
	}
	n2 := startNode(t, dir)
	if got := n2.ok("", "get", "k"); got != "v\n" {
		t.Fatalf("after restart get printed %q", got)
	}
}

// Every put acknowledged before kill -9 is there after a restart.
func TestKill9KeepsAcknowledgedPuts(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir)

	const writers = 4
	var (
		mu    sync.Mutex
		acked = map[string]string{}
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		// enough is closed once 40 puts are acknowledged.
		enough     = make(chan struct{})
		enoughOnce sync.Once
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("k/%d/%d", w, i), fmt.Sprintf("v%d-%d", w, i)
				if r := n.dkv("", "--timeout", "2s", "put", k, v); r.code == 0 {
					mu.Lock()
					acked[k] = v
					if len(acked) >= 40 {
						enoughOnce.Do(func() { close(enough) })
					}
					mu.Unlock()
				} else {
					return // the server is gone
				}
			}
		}()
	}
	// Kill once enough puts are acknowledged, while writers are mid-flight.
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
		t.Fatal("fewer than 40 puts acknowledged in 60s")
	}
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.exited
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()

	n2 := startNode(t, dir)
	out := n2.ok("", "-o", "json", "get", "k/", "--prefix", "--count")
	var count int
	if _, err := fmt.Sscanf(out, `{"revision":%d,"count":%d`, new(int64), &count); err != nil {
		t.Fatalf("count output %q: %v", out, err)
	}
	if count < len(acked) {
		t.Fatalf("%d keys after restart, %d were acknowledged", count, len(acked))
	}
	listing := n2.ok("", "get", "k/", "--prefix")
	lines := strings.Split(strings.TrimSuffix(listing, "\n"), "\n")
	got := map[string]string{}
	for i := 0; i+1 < len(lines); i += 2 {
		got[lines[i]] = lines[i+1]
	}
	for k, v := range acked {
		if got[k] != v {
			t.Errorf("acknowledged put %s=%s lost after kill -9 (read %q)", k, v, got[k])
		}
	}
	t.Logf("%d acknowledged puts survived kill -9", len(acked))
}
