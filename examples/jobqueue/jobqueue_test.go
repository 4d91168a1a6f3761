package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/server/embed"
)

// TestJobQueueSurvivesAFrozenWorker runs the scenario on an embedded
// store with a 1s visibility timeout. A worker freezes holding invoice-2
// (its claim expires); another worker must process it; every invoice is
// acked exactly once; the poison invoice is dead-lettered after exactly
// its maximum attempts and, requeued, acked once; the frozen worker's late
// ack is refused. The run's context bounds every wait.
func TestJobQueueSurvivesAFrozenWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const jobs, maxAttempts = 8, 3
	res, err := run(ctx, c, options{jobs: jobs, visibility: time.Second, maxAttempts: maxAttempts,
		backoff: 50 * time.Millisecond, queue: "t-jobqueue", results: "t/jobqueue/results/", out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.acks) != jobs {
		t.Errorf("%d invoices acked, want %d: %v", len(res.acks), jobs, res.acks)
	}
	for name, n := range res.acks {
		if n != 1 {
			t.Errorf("%s acked %d times, want exactly once", name, n)
		}
	}
	if res.results != jobs {
		t.Errorf("%d results written under a claim, want %d", res.results, jobs)
	}

	claims := res.claimedBy[frozenJob]
	if len(claims) != 2 || claims[0] != res.frozen || res.ackedBy[frozenJob] == res.frozen {
		t.Errorf("%s claimed by %v and acked by %s; want the frozen worker %s first, then another worker acking it",
			frozenJob, claims, res.ackedBy[frozenJob], res.frozen)
	}
	if !errors.Is(res.lateAckErr, recipe.ErrClaimExpired) {
		t.Errorf("the frozen worker's late ack: %v, want ErrClaimExpired", res.lateAckErr)
	}

	for name, want := range map[string]int{"invoice-1": 1, flakyOnce: 2, flakyTwice: 3} {
		if got := len(res.claimedBy[name]); got != want {
			t.Errorf("%s took %d attempts, want %d", name, got, want)
		}
	}
	if len(res.deadBeforeRequeue) != 1 || string(res.deadBeforeRequeue[0].Payload) != poisonJob ||
		res.deadBeforeRequeue[0].Attempt != maxAttempts {
		t.Errorf("dead-letter list before the requeue: %+v, want only %s after %d attempts", res.deadBeforeRequeue, poisonJob, maxAttempts)
	}
	// The poison job: maxAttempts failed attempts, then one after the requeue.
	if got := len(res.claimedBy[poisonJob]); got != maxAttempts+1 {
		t.Errorf("%s claimed %d times (%v), want %d", poisonJob, got, res.claimedBy[poisonJob], maxAttempts+1)
	}
	if f := res.final; f.Visible+f.Claimed+f.Scheduled+f.Dead != 0 {
		t.Errorf("queue not empty at the end: %+v", f)
	}
}
