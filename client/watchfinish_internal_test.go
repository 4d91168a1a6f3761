package client

import (
	"context"
	"errors"
	"testing"
)

// TestWatchErrSetOnceEventsClose: a caller that ranges over Events until
// it is closed and then asks Err must get the error the watch ended
// with, never nil: Events used to be closed before the state Err read
// was, so Err could still say "running" (a CI run of 2026-12-07 saw
// "alice's watch ended without an error" that way).
func TestWatchErrSetOnceEventsClose(t *testing.T) {
	want := errors.New("revoked")
	for i := range 20000 {
		ctx, cancel := context.WithCancel(context.Background())
		w := &Watch{ctx: ctx, cancel: cancel, events: make(chan WatchBatch), done: make(chan struct{})}
		go w.finish(want)
		for range w.Events() {
		}
		if err := w.Err(); !errors.Is(err, want) {
			t.Fatalf("try %d: Err after Events closed = %v, want %v", i, err, want)
		}
		cancel()
	}
}
