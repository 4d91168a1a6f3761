package recipe_test

import (
	"errors"
	"testing"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// plainClient is a QueueClient without the server-side claim and ack, as
// against an older server: the queue scans, races for job locks, and
// acks with a txn and a release.
type plainClient struct {
	client.KV
	client.Locker
	client.Lease
	client.Watcher
}

// TestQueueClientSideFallback: without the Queue service, claims still
// go in order, a claimed job is not handed out twice, acks and nacks
// apply and a second ack of a claim is refused.
func TestQueueClientSideFallback(t *testing.T) {
	c := openStore(t)
	pc := plainClient{c, c, c, c}
	if _, ok := any(pc).(recipe.QueueClaimer); ok {
		t.Fatal("the wrapper still has the server-side claim; the test would not test the fallback")
	}
	q, err := recipe.NewQueue(pc, "fallback")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	first, second := enqueue(t, q, "a", recipe.WithPriority(1)), enqueue(t, q, "b")
	j1, err := q.Claim(ctx)
	if err != nil || j1.ID != first || j1.Attempt != 1 {
		t.Fatalf("first claim: %+v %v; want %s, attempt 1", j1, err, first)
	}
	j2, err := q.TryClaim(ctx)
	if err != nil || j2.ID != second {
		t.Fatalf("second claim: %+v %v; want %s", j2, err, second)
	}
	if _, err := q.TryClaim(ctx); !errors.Is(err, recipe.ErrNoJob) {
		t.Fatalf("third claim: %v, want ErrNoJob", err)
	}
	if err := j1.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := j1.Ack(ctx); !errors.Is(err, recipe.ErrClaimExpired) {
		t.Fatalf("second ack: %v, want ErrClaimExpired", err)
	}
	if err := j2.Nack(ctx, errors.New("boom"), recipe.WithDeadLetter()); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{Dead: 1}) {
		t.Fatalf("stats %+v, want one dead job only", st)
	}
}
