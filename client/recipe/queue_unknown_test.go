package recipe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// lostReplyAcker applies the first server-side ack but reports its
// outcome as unknown (a leader that died after commit, before replying),
// then answers every retry with Unavailable (no leader yet).
type lostReplyAcker struct {
	*client.Client
	calls int
}

func (a *lostReplyAcker) QueueAck(ctx context.Context, h client.LockHandle, marker string, puts ...client.QueuePut) (bool, error) {
	a.calls++
	if a.calls == 1 {
		if _, err := a.Client.QueueAck(ctx, h, marker, puts...); err != nil {
			return false, err
		}
		return false, &client.Error{Kind: client.ErrUnknownOutcome, Msg: "leader lost after the proposal"}
	}
	return false, &client.Error{Kind: client.ErrUnavailable, Msg: "no leader"}
}

// TestAckAfterUnknownOutcomeNeverReportsNotApplied: an ack whose first
// attempt applied unseen and whose retries all end in Unavailable must
// not report Unavailable (which promises "not applied"): the job is done,
// and a caller told otherwise would treat it as lost or do it again.
func TestAckAfterUnknownOutcomeNeverReportsNotApplied(t *testing.T) {
	c := openStore(t)
	a := &lostReplyAcker{Client: c}
	q, err := recipe.NewQueue(a, "lostreply")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	enqueue(t, q, "a")
	j, err := q.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = j.Ack(ctx)
	if a.calls < 2 {
		t.Fatalf("the ack was tried %d times; the test needs retries", a.calls)
	}
	if errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("ack: %v; want ErrUnknownOutcome (the first attempt applied), never ErrUnavailable", err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{}) {
		t.Fatalf("stats %+v: the first attempt's ack should have applied", st)
	}
}
