package testutil

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a child process a test started, with its stdout and stderr
// appended to a log file. It is signalled only by its own pid.
type Process struct {
	Cmd    *exec.Cmd
	Log    string // path of the log file
	exited chan struct{}
	err    error
}

// StartProcess starts bin with args, its output appended to the file log
// (created if missing), in a process group of its own so that a signal
// meant for the test does not reach it. It fails the test if bin does not
// start. The caller stops it (Stop, Kill); nothing here registers a
// cleanup, since tests that restart a member start it more than once.
func StartProcess(t testing.TB, log, bin string, args ...string) *Process {
	t.Helper()
	lf, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: exec.Command(bin, args...), Log: log, exited: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = lf, lf
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("start %s %s: %v", bin, strings.Join(args, " "), err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		lf.Close()
		close(p.exited)
	}()
	return p
}

// Exited is closed once the process has exited and its log is closed.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Err is how the process ended (exec.Cmd.Wait's error); valid once
// Exited is closed.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM and waits for the exit; after 10 seconds it kills
// the process. It does nothing if the process has already exited.
func (p *Process) Stop() {
	if !p.Running() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// LogTail is the last n lines of the process's log, indented, for a
// failure message.
func (p *Process) LogTail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
