package recipe_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

func payloads(js []*recipe.Job) []string {
	var out []string
	for _, j := range js {
		out = append(out, string(j.Payload))
	}
	return out
}

// TestQueueClaimBatchOrder: ClaimBatch takes up to n visible jobs in
// claim order (priority, then enqueue order), each a claim of its own,
// and leaves the rest to the next claim.
func TestQueueClaimBatchOrder(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "batch")
	enqueue(t, q, "low1")
	enqueue(t, q, "low2")
	enqueue(t, q, "high", recipe.WithPriority(5))
	enqueue(t, q, "low3")
	enqueue(t, q, "later", recipe.WithDelay(time.Hour))
	js, err := q.ClaimBatch(testCtx(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := payloads(js), []string{"high", "low1", "low2"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batch claimed %q, want %q", got, want)
	}
	for _, j := range js {
		if j.Attempt != 1 || j.Token() <= 0 || j.Deadline.IsZero() {
			t.Fatalf("job %+v: want attempt 1, a fencing token and a deadline", j)
		}
	}
	rest, err := q.ClaimBatch(testCtx(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := payloads(rest); fmt.Sprint(got) != "[low3]" {
		t.Fatalf("second batch claimed %q, want [low3] (later is scheduled)", got)
	}
	if st := stats(t, q); st.Claimed != 4 || st.Visible != 0 || st.Scheduled != 1 {
		t.Fatalf("stats %+v, want 4 claimed, 1 scheduled", st)
	}
	if _, err := q.ClaimBatch(testCtx(t), 0); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("ClaimBatch(0): %v, want ErrInvalidInput", err)
	}
	if _, err := q.ClaimBatch(testCtx(t), recipe.MaxQueueBatch+1); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("ClaimBatch(%d): %v, want ErrInvalidInput", recipe.MaxQueueBatch+1, err)
	}
}

// TestQueueAckBatch: AckBatch acks each job as its Ack would: the jobs
// whose claims are current are done, one whose claim is no longer
// current is refused with ErrClaimExpired and stays in the queue.
func TestQueueAckBatch(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "ackbatch")
	if _, err := q.EnqueueBatch(testCtx(t), [][]byte{[]byte("a"), []byte("b"), []byte("c")}); err != nil {
		t.Fatal(err)
	}
	js, err := q.ClaimBatch(testCtx(t), 3)
	if err != nil || len(js) != 3 {
		t.Fatalf("claimed %d jobs (%v), want 3", len(js), err)
	}
	// b's claim ends (given back): its late ack must not apply.
	if err := js[1].Cancel(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	errs := q.AckBatch(testCtx(t), js)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], recipe.ErrClaimExpired) {
		t.Fatalf("ack batch: %v; want nil, ErrClaimExpired, nil", errs)
	}
	if st := stats(t, q); st.Visible != 1 || st.Claimed != 0 {
		t.Fatalf("stats %+v, want only b, visible", st)
	}
	// Acking the same jobs again: a and c are gone, so refused too.
	for i, err := range q.AckBatch(testCtx(t), []*recipe.Job{js[0], js[2]}) {
		if !errors.Is(err, recipe.ErrClaimExpired) {
			t.Fatalf("second ack of job %d: %v, want ErrClaimExpired", i, err)
		}
	}
	j, err := q.Claim(testCtx(t))
	if err != nil || string(j.Payload) != "b" {
		t.Fatalf("claim after the batch: %v %v, want b", j, err)
	}
	if errs := q.AckBatch(testCtx(t), []*recipe.Job{j}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if st := stats(t, q); st != (recipe.QueueStats{}) {
		t.Fatalf("stats %+v, want an empty queue", st)
	}
	other := newQueue(t, c, "other")
	if errs := other.AckBatch(testCtx(t), []*recipe.Job{j}); !errors.Is(errs[0], client.ErrInvalidInput) {
		t.Fatalf("acking another queue's job: %v, want ErrInvalidInput", errs[0])
	}
}

// TestQueueEnqueueBatch: EnqueueBatch adds the jobs in order, claimed in
// that order; it refuses an idempotency key.
func TestQueueEnqueueBatch(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "enqbatch")
	var in [][]byte
	for i := range 70 { // more than one group
		in = append(in, fmt.Appendf(nil, "p%02d", i))
	}
	res, err := q.EnqueueBatch(testCtx(t), in)
	if err != nil || len(res) != len(in) {
		t.Fatalf("enqueue batch: %d results, %v", len(res), err)
	}
	var got []string
	for len(got) < len(in) {
		js, err := q.ClaimBatch(testCtx(t), 16)
		if err != nil {
			t.Fatal(err)
		}
		for i, j := range js {
			if j.ID != res[len(got)+i].ID {
				t.Fatalf("job %d has id %s, want %s", len(got)+i, j.ID, res[len(got)+i].ID)
			}
		}
		got = append(got, payloads(js)...)
		for _, err := range q.AckBatch(testCtx(t), js) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, p := range got {
		if p != string(in[i]) {
			t.Fatalf("claimed %q at %d, want %q", p, i, in[i])
		}
	}
	if _, err := q.EnqueueBatch(testCtx(t), in[:1], recipe.WithIdempotencyKey("k")); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("enqueue batch with an idempotency key: %v, want ErrInvalidInput", err)
	}
}

// TestQueueLostClaimResponse: a claim that applied but whose response
// never reached its consumer (the leader died mid-claim) holds its job
// for the visibility timeout only; the job is then claimed again and
// acked, and the lost claim cannot ack it.
func TestQueueLostClaimResponse(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "lost", recipe.WithVisibilityTimeout(time.Second))
	enqueue(t, q, "job")
	// The server-side claim, its result dropped as a lost response is.
	lost, err := c.QueueClaim(testCtx(t), recipe.QueuePrefix("lost"), time.Second)
	if err != nil || !lost.Found {
		t.Fatalf("claim: %+v %v", lost, err)
	}
	if st := stats(t, q); st.Claimed != 1 {
		t.Fatalf("stats %+v, want the job claimed by nobody we know", st)
	}
	j, err := q.Claim(testCtx(t)) // woken by the lost claim's expiry
	if err != nil {
		t.Fatal(err)
	}
	if string(j.Payload) != "job" || j.Attempt != 2 || j.Token() <= lost.Handle.Token {
		t.Fatalf("claimed %+v; want the job again at attempt 2 with a larger token than %d", j, lost.Handle.Token)
	}
	if _, err := c.QueueAck(testCtx(t), lost.Handle, recipe.QueuePrefix("lost")+"c/"+lost.Job.Key[len(recipe.QueuePrefix("lost"))+2:]); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("ack by the lost claim: %v, want ErrLocked", err)
	}
	if err := j.Ack(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{}) {
		t.Fatalf("stats %+v, want an empty queue", st)
	}
}

// TestQueueAckClaimBatch: AckClaimBatch acks the jobs done and hands out
// the next ones in claim order; a refused ack is reported and its job
// stays; with nothing visible it waits like ClaimBatch.
func TestQueueAckClaimBatch(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "ackclaim")
	var in [][]byte
	for i := range 6 {
		in = append(in, fmt.Appendf(nil, "p%d", i))
	}
	if _, err := q.EnqueueBatch(testCtx(t), in); err != nil {
		t.Fatal(err)
	}
	first, errs, err := q.AckClaimBatch(testCtx(t), nil, 3)
	if err != nil || len(errs) != 0 || fmt.Sprint(payloads(first)) != "[p0 p1 p2]" {
		t.Fatalf("first call: %q %v %v", payloads(first), errs, err)
	}
	if err := first[1].Cancel(testCtx(t)); err != nil { // p1's claim ends
		t.Fatal(err)
	}
	next, errs, err := q.AckClaimBatch(testCtx(t), first, 3)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], recipe.ErrClaimExpired) || errs[2] != nil {
		t.Fatalf("acks %v; want nil, ErrClaimExpired, nil", errs)
	}
	if got := fmt.Sprint(payloads(next)); got != "[p1 p3 p4]" {
		t.Fatalf("next batch %s, want [p1 p3 p4] (p1 visible again, first in line)", got)
	}
	// Only p5 is left after these acks; then the queue is empty and the
	// call waits until a job is enqueued.
	last, errs, err := q.AckClaimBatch(testCtx(t), next, 3)
	if err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil || fmt.Sprint(payloads(last)) != "[p5]" {
		t.Fatalf("third call: %q %v %v", payloads(last), errs, err)
	}
	type result struct {
		jobs []*recipe.Job
		errs []error
		err  error
	}
	got := make(chan result, 1)
	go func() {
		j, e, err := q.AckClaimBatch(testCtx(t), last, 3)
		got <- result{j, e, err}
	}()
	// The ack of p5 applies before the wait: poll for the empty queue.
	deadline := time.Now().Add(30 * time.Second)
	for st := stats(t, q); st != (recipe.QueueStats{}); st = stats(t, q) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want p5 acked while the call waits", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	enqueue(t, q, "late")
	r := <-got
	if r.err != nil || r.errs[0] != nil || fmt.Sprint(payloads(r.jobs)) != "[late]" {
		t.Fatalf("waiting call: %q %v %v", payloads(r.jobs), r.errs, r.err)
	}
}
