package exenv

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Log prints the lines of a scenario's account, each with the time since
// the scenario started, one at a time (its workers print concurrently).
type Log struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

// NewLog returns a Log writing to w; its clock starts now.
func NewLog(w io.Writer) *Log { return &Log{w: w, start: time.Now()} }

// NewLogSince returns a Log writing to w whose clock started at start:
// for a child process whose lines interleave with its parent's.
func NewLogSince(w io.Writer, start time.Time) *Log { return &Log{w: w, start: start} }

// Start is when the Log's clock started.
func (l *Log) Start() time.Time { return l.start }

// Printf prints one line.
func (l *Log) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "[%5.1fs] %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(format, args...))
}

// Say prints a line without a time, for headings and summaries.
func (l *Log) Say(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}

// TestWriter adapts a test's Logf to an io.Writer, so a scenario's
// account appears in the test's output.
type TestWriter func(format string, args ...any)

func (t TestWriter) Write(p []byte) (int, error) {
	t("%s", p)
	return len(p), nil
}
