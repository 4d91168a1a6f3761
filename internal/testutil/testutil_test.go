package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends its
// goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f with a recorder and returns what it failed with ("" if
// it did not).
func failure(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r.msg
}

func TestEventually(t *testing.T) {
	n := 0
	if msg := failure(t, func(tb testing.TB) {
		Eventually(tb, 10*time.Second, "three calls", func() bool { n++; return n == 3 })
	}); msg != "" || n != 3 {
		t.Fatalf("holding on the third call: failed %q after %d calls", msg, n)
	}
	msg := failure(t, func(tb testing.TB) { Eventually(tb, 20*time.Millisecond, "never", func() bool { return false }) })
	if msg != "timed out after 20ms waiting for never" {
		t.Fatalf("never holding: %q", msg)
	}
}

func TestEventuallyNoError(t *testing.T) {
	var deadline bool
	msg := failure(t, func(tb testing.TB) {
		EventuallyNoError(tb, 20*time.Millisecond, "the key", func(ctx context.Context) error {
			_, deadline = ctx.Deadline()
			return errors.New("not found")
		})
	})
	if msg != "timed out after 20ms waiting for the key: not found" || !deadline {
		t.Fatalf("failing: %q (ctx had a deadline: %v)", msg, deadline)
	}
	if msg := failure(t, func(tb testing.TB) {
		EventuallyNoError(tb, time.Second, "at once", func(context.Context) error { return nil })
	}); msg != "" {
		t.Fatalf("succeeding: %q", msg)
	}
}

func TestFreeAddrIsBindable(t *testing.T) {
	a := FreeAddr(t)
	if !strings.HasPrefix(a, "127.") {
		t.Fatalf("%s is not loopback", a)
	}
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestProcess(t *testing.T) {
	log := filepath.Join(t.TempDir(), "p.log")
	p := StartProcess(t, log, "/bin/sh", "-c", "echo first; exec sleep 60")
	Eventually(t, 10*time.Second, "the first line in the log", func() bool { return strings.Contains(p.LogTail(5), "first") })
	if !p.Running() {
		t.Fatal("not running before Stop")
	}
	p.Stop()
	if p.Running() || p.Err() == nil {
		t.Fatalf("after Stop (SIGTERM to sleep): running %v, err %v", p.Running(), p.Err())
	}
	q := StartProcess(t, log, "/bin/sh", "-c", "echo second")
	<-q.Exited()
	if q.Err() != nil {
		t.Fatal(q.Err())
	}
	if got := q.LogTail(5); got != "  first\n  second" {
		t.Fatalf("log of two runs (appended): %q", got)
	}
	q.Kill() // a no-op once exited
}
