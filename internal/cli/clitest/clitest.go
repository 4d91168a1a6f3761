// Package clitest runs the dkv binary for the tests of internal/cli and
// internal/cli/servercmd: the binary built once (Main, Bin), a `dkv
// serve` on free ports (StartServe), and dkv commands run against it
// (Node.DKV, OK, Fails). Both halves of the command share it, so a test
// lives with the commands it is about and not with the harness.
//
// Only tests import it. It imports no DKV package but testutil, so the
// CLI's layering test is unaffected by it.
package clitest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
)

// Bin is the dkv binary Main built.
var Bin string

// Main builds the dkv binary (with the race detector when the tests have
// it, so that the server the tests start is checked too), sets Bin and
// runs the tests; a package's TestMain calls it.
func Main(m *testing.M) {
	var err error
	if Bin, err = testutil.BuildDKV(raceEnabled); err != nil {
		fmt.Fprintf(os.Stderr, "building dkv: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// Node is a running `dkv serve` process, or (with only T and Addr) an
// endpoint commands are run against.
type Node struct {
	T       *testing.T
	Cmd     *exec.Cmd
	Addr    string
	Stdout  *LockedBuffer
	LogPath string
	Exited  chan struct{}
	ExitErr error
}

// LockedBuffer is a bytes.Buffer a process's output goroutine writes
// while the test reads it.
type LockedBuffer = testutil.LockedBuffer

// StartServe runs dkv serve with extra flags on free ports with its data
// in dir and waits until `dkv status` answers. The node is killed when
// the test ends; its output is logged if the test failed.
func StartServe(t *testing.T, dir string, extra ...string) *Node {
	t.Helper()
	return StartServeEnv(t, dir, nil, extra...)
}

// StartServeEnv is StartServe with env added to the process's environment.
func StartServeEnv(t *testing.T, dir string, env []string, extra ...string) *Node {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	args := append([]string{"serve", "--data-dir", dir, "--client-addr", "127.0.0.1:0", "--http-addr", "", "--peer-addr", ""}, extra...)
	cmd := exec.Command(Bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = logf
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &Node{T: t, Cmd: cmd, Stdout: &LockedBuffer{}, LogPath: logPath, Exited: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(n.Stdout, line)
			// "client gRPC: ADDR", with " (advertised as ...)" when that differs.
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), "client gRPC:"); ok {
				addrc <- strings.Fields(a)[0]
			}
		}
		n.ExitErr = cmd.Wait()
		close(n.Exited)
	}()
	t.Cleanup(func() {
		n.Kill()
		if t.Failed() {
			logs, _ := os.ReadFile(logPath)
			t.Logf("serve stdout:\n%s\nserve stderr (tail):\n%s", n.Stdout, Tail(string(logs), 3000))
		}
	})
	select {
	case n.Addr = <-addrc:
	case <-n.Exited:
		t.Fatalf("dkv serve exited before listening: %v", n.ExitErr)
	case <-time.After(30 * time.Second):
		t.Fatal("dkv serve printed no client address within 30s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := n.DKV("", "status")
		if r.Code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dkv status never succeeded: %+v", r)
		}
	}
	return n
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Kill kills the node's process and waits for it to exit.
func (n *Node) Kill() {
	n.Cmd.Process.Kill()
	<-n.Exited
}

// Result is how a dkv command ended.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// DKV runs the CLI against n with stdin and args.
func (n *Node) DKV(stdin string, args ...string) Result {
	n.T.Helper()
	return n.Run(nil, stdin, args...)
}

// DKVEnv is DKV with extra environment variables.
func (n *Node) DKVEnv(env []string, args ...string) Result {
	n.T.Helper()
	return n.Run(env, "", args...)
}

// Run runs dkv with args against n (DKV_ENDPOINTS), a 10s --timeout, the
// extra environment env and stdin.
func (n *Node) Run(env []string, stdin string, args ...string) Result {
	n.T.Helper()
	cmd := exec.Command(Bin, append([]string{"--timeout", "10s"}, args...)...)
	cmd.Env = append(append(os.Environ(), "DKV_ENDPOINTS="+n.Addr), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.T.Fatalf("running dkv %q: %v", args, err)
	}
	return Result{out.String(), errb.String(), code}
}

// OK runs dkv and fails the test unless it exits 0; it returns stdout.
func (n *Node) OK(stdin string, args ...string) string {
	n.T.Helper()
	r := n.DKV(stdin, args...)
	if r.Code != 0 {
		n.T.Fatalf("dkv %q: exit %d, stderr %q", args, r.Code, r.Stderr)
	}
	return r.Stdout
}

// Fails runs dkv and checks the exit code and the stderr prefix.
func (n *Node) Fails(code int, stderrPrefix string, args ...string) Result {
	n.T.Helper()
	r := n.DKV("", args...)
	if r.Code != code || !strings.HasPrefix(r.Stderr, stderrPrefix) {
		n.T.Fatalf("dkv %q: exit %d stderr %q; want exit %d stderr starting %q", args, r.Code, r.Stderr, code, stderrPrefix)
	}
	return r
}
