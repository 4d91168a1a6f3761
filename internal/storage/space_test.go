package storage

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A full disk makes Pebble report the same failing flush over and over;
// it must be one log line per kind per interval, not one per retry.
func TestPebbleLoggerRateLimitsBackgroundErrors(t *testing.T) {
	var buf bytes.Buffer
	l := newPebbleLogger(slog.New(slog.NewTextHandler(&buf, nil)), nil, time.Minute)
	now := time.Unix(1000, 0)
	l.limit.SetClock(func() time.Time { return now })
	bg := l.eventListener().BackgroundError
	for range 1000 {
		bg(syscall.ENOSPC)
		l.Errorf("background error: %s", "write 000011.sst: no space left on device")
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("2000 errors of 2 kinds in one interval logged %d lines:\n%s", n, buf.String())
	}
	now = now.Add(time.Minute)
	bg(syscall.ENOSPC)
	if !strings.Contains(buf.String(), "suppressed_since_last=999") {
		t.Fatalf("the next interval's line does not count the suppressed ones:\n%s", buf.String())
	}
}

// Pebble's Fatalf must not panic the process: it reports the failure once
// and never returns into Pebble.
func TestPebbleLoggerFatalDoesNotPanic(t *testing.T) {
	got := make(chan error, 2)
	l := newPebbleLogger(slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), func(err error) { got <- err }, 0)
	returned := make(chan struct{})
	for range 2 {
		go func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Fatalf panicked: %v", r)
				}
				close(returned)
			}()
			l.Fatalf("pebble: fatal commit error: %v", "write 000009.log: no space left on device")
		}()
	}
	err := <-got
	if !errors.Is(err, ErrDiskFull) {
		t.Errorf("fatal error %v does not match ErrDiskFull", err)
	}
	select {
	case err := <-got:
		t.Errorf("onFatal called twice (%v)", err)
	case <-returned:
		t.Error("Fatalf returned into Pebble")
	case <-time.After(100 * time.Millisecond):
	}
}
