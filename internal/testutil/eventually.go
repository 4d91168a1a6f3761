package testutil

import (
	"context"
	"testing"
	"time"
)

// pollInterval is how often Eventually re-checks its condition.
const pollInterval = 5 * time.Millisecond

// Eventually polls cond until it holds. If timeout passes first, it fails
// the test with "timed out after <timeout> waiting for <what>".
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// EventuallyNoError polls f until it returns nil. f's ctx ends when
// timeout passes; then the test fails naming what it waited for and f's
// last error.
func EventuallyNoError(t testing.TB, timeout time.Duration, what string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := f(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
		case <-tick.C:
		}
	}
}
