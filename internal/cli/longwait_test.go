package cli_test

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var longTests = flag.Bool("dkv.long", os.Getenv("DKV_LONG_TESTS") == "1", "run the long tests (a standby waiting 5 minutes); also DKV_LONG_TESTS=1")

// startServe runs dkv serve with extra flags on free ports and waits
// until `dkv status` answers.
func startServe(t *testing.T, dir string, extra ...string) *node {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	args := append([]string{"serve", "--data-dir", dir, "--client-addr", "127.0.0.1:0", "--http-addr", "", "--peer-addr", ""}, extra...)
	cmd := exec.Command(dkvBin, args...)
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
				addrc <- strings.Fields(a)[0]
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
	for n.dkv("", "status").code != 0 {
		if time.Now().After(deadline) {
			t.Fatal("dkv status never succeeded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// bg is a dkv client command running in the background.
type bg struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	errb   *lockedBuffer
	exited chan struct{}
	err    error
}

func (n *node) background(args ...string) *bg {
	n.t.Helper()
	b := &bg{out: &lockedBuffer{}, errb: &lockedBuffer{}, exited: make(chan struct{})}
	// A short --timeout: it bounds connecting, never the wait.
	b.cmd = exec.Command(dkvBin, append([]string{"--timeout", "2s"}, args...)...)
	b.cmd.Env = append(os.Environ(), "DKV_ENDPOINTS="+n.addr)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.errb
	if err := b.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.exited) }()
	n.t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.exited
	})
	return b
}

// waitOutput waits until b has printed want, failing if it exits first.
func (b *bg) waitOutput(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(b.out.String(), want) {
		select {
		case <-b.exited:
			if strings.Contains(b.out.String(), want) {
				return
			}
			t.Fatalf("%q exited (%v) without printing %q; stdout %q stderr %q", b.cmd.Args, b.err, want, b.out, b.errb)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q printed no %q within %v; stdout %q stderr %q", b.cmd.Args, want, within, b.out, b.errb)
		}
	}
}

// waitWaiters polls `dkv lock show key` until n callers wait.
func (n *node) waitWaiters(key string, count int) {
	n.t.Helper()
	want := fmt.Sprintf("waiting=%d", count)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := n.dkv("", "lock", "show", key)
		if strings.Contains(r.stdout, want) {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("lock %s: want %s, last %+v", key, want, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdFor keeps the test (and so a lock holder or leader) for d, failing
// at once if the waiting command gives up meanwhile: the length of the
// hold is the point of these tests, not a stand-in for synchronisation.
func holdFor(t *testing.T, waiter *bg, d time.Duration) {
	t.Helper()
	select {
	case <-waiter.exited:
		t.Fatalf("%q gave up after waiting less than %v: %v; stdout %q stderr %q", waiter.cmd.Args, d, waiter.err, waiter.out, waiter.errb)
	case <-time.After(d):
	}
}

func standbyElect(t *testing.T, n *node, wait time.Duration) {
	leader := n.background("elect", "svc", "primary")
	leader.waitOutput(t, "elected svc term=", 30*time.Second)
	standby := n.background("elect", "svc", "standby")
	n.waitWaiters("svc", 1)
	holdFor(t, standby, wait)
	// The leader resigns on SIGINT; the standby is elected at once.
	if err := leader.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	standby.waitOutput(t, "elected svc term=", 30*time.Second)
	<-leader.exited
	if leader.err != nil {
		t.Fatalf("resigning leader exited with %v; stderr %q", leader.err, leader.errb)
	}
}

func lockWait(t *testing.T, n *node, wait time.Duration) {
	h := strings.TrimSpace(n.ok("", "lock", "acquire", "job", "--ttl", "1h"))
	waiter := n.background("lock", "acquire", "job", "--ttl", "30s", "--wait")
	n.waitWaiters("job", 1)
	holdFor(t, waiter, wait)
	n.ok("", "lock", "release", h)
	select {
	case <-waiter.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("waiter not granted 30s after the release")
	}
	if waiter.err != nil || !strings.HasPrefix(waiter.out.String(), "dkvlock1.") {
		t.Fatalf("waiter: %v, stdout %q, stderr %q; want a handle", waiter.err, waiter.out, waiter.errb)
	}
	// dkv lock KEY -- CMD waits the same way.
	h = strings.TrimSpace(n.ok("", "lock", "acquire", "job2", "--ttl", "1h"))
	run := n.background("lock", "job2", "--ttl", "30s", "--", "echo", "ran")
	n.waitWaiters("job2", 1)
	holdFor(t, run, wait)
	n.ok("", "lock", "release", h)
	select {
	case <-run.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("dkv lock -- echo not run 30s after the release")
	}
	if run.err != nil || run.out.String() != "ran\n" {
		t.Fatalf("dkv lock -- echo: %v, stdout %q, stderr %q", run.err, run.out, run.errb)
	}
}

// A server whose request timeout is 1s still lets a lock wait, a
// `dkv lock -- CMD` and a standby `dkv elect` wait 3s: no hidden
// server-side deadline applies to blocking waits, and the CLI's --timeout
// (2s here) bounds connecting only.
func TestCLIWaitsOutlastRequestTimeout(t *testing.T) {
	n := startServe(t, t.TempDir(), "--request-timeout", "1s")
	t.Run("lock", func(t *testing.T) { n.t = t; lockWait(t, n, 3*time.Second) })
	t.Run("elect", func(t *testing.T) { n.t = t; standbyElect(t, n, 3*time.Second) })
}

// The scenario DKV exists for: a standby `dkv elect` candidate waits 5
// minutes under the default server settings, then becomes leader when
// the leader resigns. Run with -dkv.long or DKV_LONG_TESTS=1.
func TestCLIStandbyWaitsFiveMinutes(t *testing.T) {
	if !*longTests {
		t.Skip("long test: run with -dkv.long or DKV_LONG_TESTS=1")
	}
	n := startServe(t, t.TempDir())
	standbyElect(t, n, 5*time.Minute)
}
