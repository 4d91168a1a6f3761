package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// waitCount polls `dkv get PREFIX --prefix --count` until it prints want.
func waitCount(n *clitest.Node, prefix string, want int) {
	n.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := strings.TrimSpace(n.OK("", "get", prefix, "--prefix", "--count"))
		if got == strconv.Itoa(want) {
			return
		}
		if time.Now().After(deadline) {
			n.T.Fatalf("%s: %s keys, want %d", prefix, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holder is the shell COMMAND of a holder that says it is in, then stays
// until the test creates release.
func holder(name, release string) []string {
	return []string{"sh", "-c", `echo ` + name + ` in mode=$DKV_RWLOCK_MODE token=$DKV_LOCK_TOKEN; while [ ! -e '` + release + `' ]; do sleep 0.02; done`}
}

func released(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func exitedOK(t *testing.T, b *bg) {
	t.Helper()
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%q did not exit; stdout %q stderr %q", b.cmd.Args, b.out, b.errb)
	}
	if b.err != nil {
		t.Fatalf("%q: %v; stdout %q stderr %q", b.cmd.Args, b.err, b.out, b.errb)
	}
}

// Readers share the lock; a writer waits for them and has it alone; a
// reader that comes after a waiting writer waits behind it; dkv exits
// with the command's exit code.
func TestCLIRWLock(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	dir := t.TempDir()
	rel := func(s string) string { return filepath.Join(dir, s) }

	r1 := background(n, append([]string{"rwlock", "read", "cfg", "--"}, holder("r1", rel("r1"))...)...)
	r1.waitOutput(t, "r1 in mode=read token=", 30*time.Second)
	r2 := background(n, append([]string{"rwlock", "read", "cfg", "--"}, holder("r2", rel("r2"))...)...)
	r2.waitOutput(t, "r2 in mode=read", 30*time.Second) // while r1 holds: shared
	w := background(n, append([]string{"rwlock", "write", "cfg", "--"}, holder("w", rel("w"))...)...)
	waitCount(n, "cfg/q/", 3) // w is queued behind the readers
	r3 := background(n, append([]string{"rwlock", "read", "cfg", "--"}, holder("r3", rel("r3"))...)...)
	waitCount(n, "cfg/q/", 4)

	released(t, rel("r1"))
	exitedOK(t, r1)
	if strings.Contains(w.out.String(), "in") {
		t.Fatalf("writer ran while reader r2 held the lock: %q", w.out)
	}
	released(t, rel("r2"))
	exitedOK(t, r2)
	w.waitOutput(t, "w in mode=write", 30*time.Second)
	// While the writer holds, the reader that queued behind it must not.
	if got := r3.out.String(); got != "" {
		t.Fatalf("reader r3, queued after the writer, ran while it held the lock: %q", got)
	}
	released(t, rel("w"))
	exitedOK(t, w)
	r3.waitOutput(t, "r3 in mode=read", 30*time.Second)
	released(t, rel("r3"))
	exitedOK(t, r3)
	waitCount(n, "cfg/q/", 0) // every hold released

	if r := n.DKV("", "rwlock", "write", "cfg", "--", "sh", "-c", "exit 7"); r.Code != 7 {
		t.Fatalf("rwlock write -- exit 7: exit %d, stderr %q", r.Code, r.Stderr)
	}
	n.Fails(2, "Error: usage: rwlock read needs NAME -- COMMAND", "rwlock", "read", "cfg")
}

// Two shell steps of a double barrier: enter returns only once N have
// entered, leave only once all N have left; the -- COMMAND form does both
// around the command.
func TestCLIDoubleBarrier(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	first := background(n, "barrier", "enter", "round-1", "-n", "2")
	waitCount(n, "round-1/waiters/", 1)
	select {
	case <-first.exited:
		t.Fatalf("enter returned with 1 of 2 participants: %v %q %q", first.err, first.out, first.errb)
	default:
	}
	id2 := strings.TrimSpace(n.OK("", "barrier", "enter", "round-1", "-n", "2"))
	exitedOK(t, first)
	id1 := strings.TrimSpace(first.out.String())
	hexID := regexp.MustCompile(`^[0-9a-f]{24}$`)
	if !hexID.MatchString(id1) || !hexID.MatchString(id2) || id1 == id2 {
		t.Fatalf("enter printed ids %q and %q", id1, id2)
	}
	// The participants outlive their enter processes.
	waitCount(n, "round-1/waiters/", 2)

	leaving := background(n, "barrier", "leave", "round-1", "-n", "2", "--id", id1)
	waitCount(n, "round-1/waiters/", 1)
	select {
	case <-leaving.exited:
		t.Fatalf("leave returned while a participant remained: %v %q %q", leaving.err, leaving.out, leaving.errb)
	default:
	}
	if got := n.OK("", "barrier", "leave", "round-1", "-n", "2", "--id", id2); got != "OK\n" {
		t.Fatalf("leave printed %q", got)
	}
	exitedOK(t, leaving)
	waitCount(n, "round-1/waiters/", 0)

	// -- COMMAND: each runs its command once both have entered.
	a := background(n, "barrier", "enter", "round-2", "-n", "2", "--", "echo", "a ran")
	waitCount(n, "round-2/waiters/", 1)
	if got := a.out.String(); got != "" {
		t.Fatalf("command ran with 1 of 2 participants: %q", got)
	}
	if r := n.DKV("", "barrier", "enter", "round-2", "-n", "2", "--", "sh", "-c", "echo b ran; exit 3"); r.Code != 3 || r.Stdout != "b ran\n" {
		t.Fatalf("enter -- sh: exit %d stdout %q stderr %q; want exit 3", r.Code, r.Stdout, r.Stderr)
	}
	exitedOK(t, a)
	if a.out.String() != "a ran\n" {
		t.Fatalf("a printed %q", a.out)
	}
	n.Fails(6, "Error: InvalidInput:", "barrier", "leave", "round-2", "-n", "2", "--id", "nothex")
	n.Fails(6, "Error: InvalidInput:", "barrier", "enter", "round-3")
}
