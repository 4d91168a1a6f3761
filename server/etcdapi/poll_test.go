package etcdapi_test

import (
	"testing"
	"time"
)

// pollT polls a condition until it holds or a deadline passes.
type pollT struct{ t *testing.T }

func (p *pollT) until(cond func() bool, what string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
