package raftnode

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
)

// TestInspectGivenUpNeverRuns: an Inspect whose ctx ends while the raft
// loop is busy returns the ctx's error, and its function never runs
// after that, so it cannot write into what the caller reads once
// Inspect returned (a leader handing off leadership while stopping read
// its results racing with the loop writing them).
func TestInspectGivenUpNeverRuns(t *testing.T) {
	n, _, stop := startNode(t, t.TempDir(), 0)
	defer stop()
	// Hold the loop in a first Inspect until released.
	held, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- n.Inspect(context.Background(), func(*raft.RawNode) { close(held); <-release })
	}()
	<-held
	var ran atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() { second <- n.Inspect(ctx, func(*raft.RawNode) { ran.Store(true) }) }()
	// Once the second is queued for the loop (reportc is buffered), end
	// its ctx, then let the loop go on.
	deadline := time.Now().Add(10 * time.Second)
	for len(n.reportc) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second Inspect was never queued")
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("Inspect with its ctx ended = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// A third Inspect runs after anything queued before it.
	ctx3, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	if err := n.Inspect(ctx3, func(*raft.RawNode) {}); err != nil {
		t.Fatal(err)
	}
	if ran.Load() {
		t.Fatal("the given-up Inspect's function ran after Inspect returned its error")
	}
}
