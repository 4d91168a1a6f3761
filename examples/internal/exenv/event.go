package exenv

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An event line is what an instance run with --instance prints for each
// thing it does, one line per event, for a person watching and for the
// programs that watch it (the driver examples/run and the process tests):
//
//	15:04:05.123 w1[4242] leader term=5
//	15:04:06.001 w1[4242] refused period=3 err="locked: lock handle ..."
//
// the wall-clock time, the instance's name and pid, what happened (one
// word), then key=value fields. A value holding a space, a quote or an
// equals sign, or an empty one, is quoted as Go quotes strings.

// eventTime is the layout of an event line's time.
const eventTime = "15:04:05.000"

// Event is one parsed event line.
type Event struct {
	Line     string // the line as printed
	Instance string
	PID      int
	What     string
	Fields   map[string]string
}

// Get is the field k, "" if the event has none.
func (e Event) Get(k string) string { return e.Fields[k] }

// Int is the field k as an integer, 0 if missing or not a number.
func (e Event) Int(k string) int {
	n, _ := strconv.Atoi(e.Fields[k])
	return n
}

// FormatEvent is the event line for what happened at t in the instance
// name (pid), with fields kv as key, value pairs.
func FormatEvent(t time.Time, name string, pid int, what string, kv ...any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s[%d] %s", t.Format(eventTime), name, pid, what)
	for i := 0; i+1 < len(kv); i += 2 {
		v := fmt.Sprint(kv[i+1])
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %v=%s", kv[i], v)
	}
	return b.String()
}

// ParseEvent parses an event line; ok is false for any other line (a
// Go panic, a log line of a library).
func ParseEvent(line string) (e Event, ok bool) {
	rest := strings.TrimRight(line, "\r\n")
	e.Line = rest
	var tm, who string
	if tm, rest, ok = strings.Cut(rest, " "); !ok {
		return e, false
	}
	if _, err := time.Parse(eventTime, tm); err != nil {
		return e, false
	}
	if who, rest, ok = strings.Cut(rest, " "); !ok {
		return e, false
	}
	name, pid, ok := strings.Cut(strings.TrimSuffix(who, "]"), "[")
	if !ok || !strings.HasSuffix(who, "]") {
		return e, false
	}
	var err error
	if e.PID, err = strconv.Atoi(pid); err != nil || name == "" {
		return e, false
	}
	e.Instance = name
	e.What, rest, _ = strings.Cut(rest, " ")
	if e.What == "" {
		return e, false
	}
	e.Fields = map[string]string{}
	for rest != "" {
		k, v, found := strings.Cut(rest, "=")
		if !found || k == "" || strings.Contains(k, " ") {
			return e, false
		}
		if strings.HasPrefix(v, `"`) {
			q, err := strconv.QuotedPrefix(v)
			if err != nil {
				return e, false
			}
			rest = strings.TrimPrefix(v[len(q):], " ")
			if v, err = strconv.Unquote(q); err != nil {
				return e, false
			}
		} else {
			v, rest, _ = strings.Cut(v, " ")
		}
		e.Fields[k] = v
	}
	return e, true
}

// Events prints an instance's event lines, one at a time (its
// goroutines emit concurrently).
type Events struct {
	mu   sync.Mutex
	w    io.Writer
	name string
	pid  int
}

// NewEvents returns an Events printing to w as the instance name of the
// process pid.
func NewEvents(w io.Writer, name string, pid int) *Events {
	return &Events{w: w, name: name, pid: pid}
}

// PID is the pid in the event lines.
func (e *Events) PID() int { return e.pid }

// Emit prints the event what with fields kv (key, value, key, value...).
func (e *Events) Emit(what string, kv ...any) {
	line := FormatEvent(time.Now(), e.name, e.pid, what, kv...)
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintln(e.w, line)
}
