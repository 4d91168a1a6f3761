// Package proc runs the instances of an example as processes of their
// own and follows what they do: each is the example's binary run with
// --instance NAME, whose output is kept in a log file and whose event
// lines (exenv.ParseEvent) are collected, in the order they are read, for
// a caller to wait on. It signals them by pid: SIGTERM to stop one
// cleanly, SIGKILL to kill it, SIGSTOP and SIGCONT to freeze and thaw it.
//
// The driver examples/run and the examples' process tests (through
// examples/internal/proctest) both use it, so that what a test checks is
// what a person watching the driver sees. It imports no testing package.
package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// Group is a set of instances of one example and the events of all of
// them, in the order they were read.
type Group struct {
	// Bin is the example's binary; Args are given to every instance,
	// before --instance NAME and the instance's own arguments.
	Bin  string
	Args []string
	// LogDir holds each instance's output, in NAME.log.
	LogDir string
	// Out, if set, gets every line of every instance as it is read
	// (event lines as printed; other lines prefixed with NAME[PID]), and
	// a line for each exit.
	Out io.Writer

	mu        sync.Mutex
	outMu     sync.Mutex
	instances []*Instance
	events    []exenv.Event
	changed   chan struct{} // closed and replaced at each new event
}

// Instance is one instance process.
type Instance struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // the path of its log file

	g      *Group
	exited chan struct{}
	err    error
}

// Start starts the instance name with the group's arguments and then
// args. Its output is appended to LogDir/NAME.log. It runs in a process
// group of its own, so that a Ctrl-C meant for the caller does not reach
// it: the caller stops it.
func (g *Group) Start(name string, args ...string) (*Instance, error) {
	lf, err := os.OpenFile(filepath.Join(g.LogDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		lf.Close()
		return nil, err
	}
	full := append(append(append([]string{}, g.Args...), "--instance", name), args...)
	in := &Instance{Name: name, Cmd: exec.Command(g.Bin, full...), Log: lf.Name(), g: g, exited: make(chan struct{})}
	in.Cmd.Stdout, in.Cmd.Stderr = w, w
	in.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = in.Cmd.Start()
	w.Close() // the child has its copy; EOF comes when it exits
	if err != nil {
		r.Close()
		lf.Close()
		return nil, fmt.Errorf("starting %s %s: %w", g.Bin, strings.Join(full, " "), err)
	}
	g.mu.Lock()
	g.instances = append(g.instances, in)
	g.mu.Unlock()
	go in.read(r, lf)
	return in, nil
}

// read copies the instance's output to its log (and Out), collects its
// events, and records the exit as an event "exited" with the exit
// status. Processes the instance started may outlive it and still hold
// its output (a reconciler's children are services of their own): once
// the instance has exited and nothing more comes for a moment, its exit
// is recorded, and their lines are still read, to the end.
func (in *Instance) read(r *os.File, lf *os.File) {
	defer lf.Close()
	waited := make(chan struct{})
	go func() {
		in.err = in.Cmd.Wait()
		close(waited)
		// What the instance wrote before it exited is in the pipe now:
		// reading stops to record the exit at the first pause after it.
		_ = r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	}()
	recorded := false
	exit := func() {
		<-waited
		if !recorded {
			recorded = true
			in.exit(lf)
		}
	}
	br := bufio.NewReader(r)
	var partial string
	for {
		line, err := br.ReadString('\n')
		partial += line
		if err == nil || (err == io.EOF && partial != "") {
			in.line(lf, partial)
			partial = ""
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			exit()
			_ = r.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			break
		}
	}
	r.Close()
	exit()
}

// line handles one line the instance (or a process it started) printed.
func (in *Instance) line(lf *os.File, line string) {
	lf.WriteString(line)
	line = strings.TrimRight(line, "\r\n")
	ev, ok := exenv.ParseEvent(line)
	if !ok {
		line = fmt.Sprintf("%s[%d] | %s", in.Name, in.PID(), line)
	}
	in.g.print(line)
	if ok {
		in.g.add(ev)
	}
}

// exit records the instance's exit, once Cmd.Wait has returned.
func (in *Instance) exit(lf *os.File) {
	status := "0"
	if in.err != nil {
		status = in.err.Error()
	}
	line := exenv.FormatEvent(time.Now(), in.Name, in.PID(), "exited", "status", status)
	fmt.Fprintln(lf, line)
	ev, _ := exenv.ParseEvent(line)
	in.g.print(line)
	in.g.add(ev)
	close(in.exited)
}

func (g *Group) print(line string) {
	if g.Out == nil {
		return
	}
	g.outMu.Lock()
	defer g.outMu.Unlock()
	fmt.Fprintln(g.Out, line)
}

func (g *Group) add(ev exenv.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.events = append(g.events, ev)
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// Say prints a line of the caller's own to Out, between the instances'
// lines, with the time as event lines have it.
func (g *Group) Say(format string, args ...any) {
	g.print(time.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...))
}

// Instances are the instances started, in order.
func (g *Group) Instances() []*Instance {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Instance(nil), g.instances...)
}

// Instance is the last instance started as name, or nil.
func (g *Group) Instance(name string) *Instance {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.instances) - 1; i >= 0; i-- {
		if g.instances[i].Name == name {
			return g.instances[i]
		}
	}
	return nil
}

// Events are every event read so far, in order.
func (g *Group) Events() []exenv.Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]exenv.Event(nil), g.events...)
}

// Len is the number of events read so far: a position to wait from.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.events)
}

// Find is the first event at position from or later for which match
// holds, among those read so far.
func (g *Group) Find(from int, match func(exenv.Event) bool) (int, exenv.Event, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := from; i < len(g.events); i++ {
		if match(g.events[i]) {
			return i, g.events[i], true
		}
	}
	return 0, exenv.Event{}, false
}

// Wait waits for the first event at position from or later (0: the
// first event ever) for which match holds, and returns it with its
// position; or ctx's error.
func (g *Group) Wait(ctx context.Context, from int, match func(exenv.Event) bool) (int, exenv.Event, error) {
	for {
		g.mu.Lock()
		for i := from; i < len(g.events); i++ {
			if match(g.events[i]) {
				ev := g.events[i]
				g.mu.Unlock()
				return i, ev, nil
			}
		}
		from = max(from, len(g.events))
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, exenv.Event{}, ctx.Err()
		}
	}
}

// StopAll stops every running instance with SIGTERM, all at once, and
// waits up to timeout for each to exit (then kills it); it returns the
// instances that did not exit cleanly (status 0 within timeout).
func (g *Group) StopAll(timeout time.Duration) []*Instance {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		bad []*Instance
	)
	for _, in := range g.Instances() {
		if !in.Running() {
			continue
		}
		wg.Go(func() {
			if err := in.Stop(timeout); err != nil {
				mu.Lock()
				bad = append(bad, in)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return bad
}

// KillAll kills every running instance and waits for the exits.
func (g *Group) KillAll() {
	for _, in := range g.Instances() {
		in.Kill()
	}
}

// PID is the instance's process id.
func (in *Instance) PID() int { return in.Cmd.Process.Pid }

// String is NAME[PID], as event lines name it.
func (in *Instance) String() string { return fmt.Sprintf("%s[%d]", in.Name, in.PID()) }

// Running reports whether the process has not exited yet (a frozen one
// is running).
func (in *Instance) Running() bool {
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

// Exited is closed once the process has exited and its output is read.
func (in *Instance) Exited() <-chan struct{} { return in.exited }

// Err is how the process ended (exec.Cmd.Wait's error); valid once
// Exited is closed.
func (in *Instance) Err() error { return in.err }

// Signal sends sig to the process (by its pid only).
func (in *Instance) Signal(sig os.Signal) error { return in.Cmd.Process.Signal(sig) }

// Kill sends SIGKILL, as kill -9 does, and waits for the exit.
func (in *Instance) Kill() {
	if in.Running() {
		_ = in.Signal(syscall.SIGKILL)
	}
	<-in.exited
}

// Freeze sends SIGSTOP: the process stops dead, its keep-alives with it,
// until Thaw.
func (in *Instance) Freeze() error { return in.Signal(syscall.SIGSTOP) }

// Thaw sends SIGCONT to a frozen process.
func (in *Instance) Thaw() error { return in.Signal(syscall.SIGCONT) }

// errStopTimeout is Stop's error when SIGTERM did not end the process.
var errStopTimeout = errors.New("did not exit after SIGTERM; killed")

// Stop sends SIGTERM (and SIGCONT, so that a frozen process sees it) and
// waits up to timeout for the exit, then kills the process. It returns
// nil if the process exited with status 0 in time.
func (in *Instance) Stop(timeout time.Duration) error {
	if in.Running() {
		_ = in.Signal(syscall.SIGTERM)
		_ = in.Thaw()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-in.exited:
		return in.err
	case <-t.C:
		in.Kill()
		return errStopTimeout
	}
}

// LogTail is the last n lines of the instance's log, indented, for a
// failure message.
func (in *Instance) LogTail(n int) string {
	b, _ := os.ReadFile(in.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
