package cli_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

var longTests = flag.Bool("dkv.long", os.Getenv("DKV_LONG_TESTS") == "1", "run the long tests (a standby waiting 5 minutes); also DKV_LONG_TESTS=1")

// bg is a dkv client command running in the background.
type bg struct {
	cmd    *exec.Cmd
	out    *clitest.LockedBuffer
	errb   *clitest.LockedBuffer
	exited chan struct{}
	err    error
}

func background(n *clitest.Node, args ...string) *bg {
	n.T.Helper()
	b := &bg{out: &clitest.LockedBuffer{}, errb: &clitest.LockedBuffer{}, exited: make(chan struct{})}
	// A short --timeout: it bounds connecting, never the wait.
	b.cmd = exec.Command(clitest.Bin, append([]string{"--timeout", "2s"}, args...)...)
	b.cmd.Env = append(os.Environ(), "DKV_ENDPOINTS="+n.Addr)
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.errb
	if err := b.cmd.Start(); err != nil {
		n.T.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.exited) }()
	n.T.Cleanup(func() {
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
func waitWaiters(n *clitest.Node, key string, count int) {
	n.T.Helper()
	want := fmt.Sprintf("waiting=%d", count)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := n.DKV("", "lock", "show", key)
		if strings.Contains(r.Stdout, want) {
			return
		}
		if time.Now().After(deadline) {
			n.T.Fatalf("lock %s: want %s, last %+v", key, want, r)
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

func standbyElect(t *testing.T, n *clitest.Node, wait time.Duration) {
	leader := background(n, "elect", "svc", "primary")
	leader.waitOutput(t, "elected svc term=", 30*time.Second)
	standby := background(n, "elect", "svc", "standby")
	waitWaiters(n, "svc", 1)
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

func lockWait(t *testing.T, n *clitest.Node, wait time.Duration) {
	h := strings.TrimSpace(n.OK("", "lock", "acquire", "job", "--ttl", "1h"))
	waiter := background(n, "lock", "acquire", "job", "--ttl", "30s", "--wait")
	waitWaiters(n, "job", 1)
	holdFor(t, waiter, wait)
	n.OK("", "lock", "release", h)
	select {
	case <-waiter.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("waiter not granted 30s after the release")
	}
	if waiter.err != nil || !strings.HasPrefix(waiter.out.String(), "dkvlock1.") {
		t.Fatalf("waiter: %v, stdout %q, stderr %q; want a handle", waiter.err, waiter.out, waiter.errb)
	}
	// dkv lock KEY -- CMD waits the same way.
	h = strings.TrimSpace(n.OK("", "lock", "acquire", "job2", "--ttl", "1h"))
	run := background(n, "lock", "job2", "--ttl", "30s", "--", "echo", "ran")
	waitWaiters(n, "job2", 1)
	holdFor(t, run, wait)
	n.OK("", "lock", "release", h)
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
	n := clitest.StartServe(t, t.TempDir(), "--request-timeout", "1s")
	t.Run("lock", func(t *testing.T) { n.T = t; lockWait(t, n, 3*time.Second) })
	t.Run("elect", func(t *testing.T) { n.T = t; standbyElect(t, n, 3*time.Second) })
}

// The scenario DKV exists for: a standby `dkv elect` candidate waits 5
// minutes under the default server settings, then becomes leader when
// the leader resigns. Run with -dkv.long or DKV_LONG_TESTS=1.
func TestCLIStandbyWaitsFiveMinutes(t *testing.T) {
	if !*longTests {
		t.Skip("long test: run with -dkv.long or DKV_LONG_TESTS=1")
	}
	n := clitest.StartServe(t, t.TempDir())
	standbyElect(t, n, 5*time.Minute)
}

// TestElectListenSaysNoLeaderYet: `dkv elect NAME --listen` on an
// election nobody leads says so (on stderr: stdout stays one line per
// leader), then prints the leader once one is elected.
func TestElectListenSaysNoLeaderYet(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	l := background(n, "elect", "svc", "--listen")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(l.errb.String(), "no leader of svc yet") {
		if time.Now().After(deadline) {
			t.Fatalf("elect --listen said nothing of the missing leader; stdout %q stderr %q", l.out, l.errb)
		}
		select {
		case <-l.exited:
			t.Fatalf("elect --listen exited (%v); stdout %q stderr %q", l.err, l.out, l.errb)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if l.out.String() != "" {
		t.Fatalf("stdout before any leader: %q", l.out)
	}
	leader := background(n, "elect", "svc", "primary")
	leader.waitOutput(t, "elected svc term=", 30*time.Second)
	l.waitOutput(t, " primary\n", 30*time.Second)
}
