package etcdcompat

import (
	"errors"
	"testing"
	"time"
)

// within fails the test unless ch is closed or sent on within d.
func within[T any](t *testing.T, d time.Duration, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s did not happen within %v", what, d)
	}
	var zero T
	return zero
}

// notYet fails the test if ch has already delivered: the caller has
// established (by the store's state) that the operation is waiting.
func notYet[T any](t *testing.T, what string, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s returned while it should still wait", what)
	default:
	}
}

var errNotYet = errors.New("not yet")
