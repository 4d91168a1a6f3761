package recipe_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/server/embed"
)

func openStore(t *testing.T) *client.Client { return openStoreB(t) }

func openStoreB(t testing.TB) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newQueue(t *testing.T, c *client.Client, name string, opts ...recipe.QueueOption) *recipe.Queue {
	t.Helper()
	q, err := recipe.NewQueue(c, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func enqueue(t *testing.T, q *recipe.Queue, payload string, opts ...recipe.EnqueueOption) string {
	t.Helper()
	e, err := q.Enqueue(context.Background(), []byte(payload), opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", payload, err)
	}
	return e.ID
}

func stats(t *testing.T, q *recipe.Queue) recipe.QueueStats {
	t.Helper()
	st, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.OldestAge, st.Revision = 0, 0
	return *st
}

// waitClaimEnded polls (with a deadline) until j's claim is no longer the
// lock holder: its lease expired in the store.
func waitClaimEnded(t *testing.T, j *recipe.Job) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		held, err := j.Claimed(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim of job %s still held after 30s", j.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestQueueClaimOrder(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "order")
	past := time.Now().Add(-time.Hour)
	enqueue(t, q, "low-1", recipe.WithPriority(-5))
	enqueue(t, q, "mid-1")
	enqueue(t, q, "mid-2")
	enqueue(t, q, "high", recipe.WithPriority(7))
	enqueue(t, q, "later", recipe.WithPriority(7), recipe.WithDelay(time.Hour))
	enqueue(t, q, "mid-0-past", recipe.WithRunAt(past)) // a past run-at is "now"
	enqueue(t, q, "low-2", recipe.WithPriority(-5))

	want := []string{"high", "mid-1", "mid-2", "mid-0-past", "low-1", "low-2"}
	var got []string
	for range want {
		j, err := q.TryClaim(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(j.Payload))
		if j.Attempt != 1 {
			t.Errorf("%s: attempt %d, want 1", j.Payload, j.Attempt)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	if _, err := q.TryClaim(testCtx(t)); !errors.Is(err, recipe.ErrNoJob) {
		t.Fatalf("TryClaim with only a scheduled job left: %v, want ErrNoJob", err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{Claimed: 6, Scheduled: 1}) {
		t.Fatalf("stats %+v", st)
	}
}

func TestQueueAckRemovesJob(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "ack")
	id := enqueue(t, q, "p")
	if st := stats(t, q); st.Visible != 1 {
		t.Fatalf("stats after enqueue %+v", st)
	}
	j, err := q.Claim(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != id || string(j.Payload) != "p" || j.Token() <= 0 {
		t.Fatalf("claimed %+v", j)
	}
	if err := j.Ack(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// The ack ended the claim: it fences nothing any more.
	if _, err := c.Put(testCtx(t), "result/p", []byte("after ack"), recipe.WithClaim(j)); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("write WithClaim after the ack: %v, want ErrLocked", err)
	}
	if err := j.Ack(testCtx(t)); !errors.Is(err, recipe.ErrClaimExpired) {
		t.Fatalf("second Ack of the same claim: %v, want ErrClaimExpired (the claim was given back)", err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{}) {
		t.Fatalf("stats after ack %+v", st)
	}
	if l, _ := q.List(testCtx(t), 0); len(l) != 0 {
		t.Fatalf("list after ack %+v", l)
	}
}

func TestQueueClaimWakesOnEnqueue(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "wake")
	got := make(chan *recipe.Job, 1)
	errc := make(chan error, 1)
	go func() {
		j, err := q.Claim(testCtx(t))
		errc <- err
		got <- j
	}()
	// The claimer is waiting (or about to): either way the job reaches it.
	enqueue(t, q, "hello")
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if j := <-got; string(j.Payload) != "hello" {
		t.Fatalf("claimed %q", j.Payload)
	}
}

func TestQueueScheduledJobBecomesVisibleAtRunAt(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "sched")
	runAt := time.Now().Add(1500 * time.Millisecond)
	enqueue(t, q, "s", recipe.WithRunAt(runAt))
	if _, err := q.TryClaim(testCtx(t)); !errors.Is(err, recipe.ErrNoJob) {
		t.Fatalf("TryClaim before run-at: %v, want ErrNoJob", err)
	}
	if st := stats(t, q); st.Scheduled != 1 || st.Visible != 0 {
		t.Fatalf("stats %+v", st)
	}
	j, err := q.Claim(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if now := time.Now(); now.Before(runAt.Truncate(time.Millisecond)) {
		t.Fatalf("claimed at %v, before its run-at %v", now, runAt)
	}
	if string(j.Payload) != "s" {
		t.Fatalf("claimed %q", j.Payload)
	}
}

func TestQueueExpiredClaimIsFenced(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "fence", recipe.WithVisibilityTimeout(time.Second))
	enqueue(t, q, "job")
	j1, err := q.Claim(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	// A second consumer waits; the first never acks. The claim's expiry
	// (its marker's deletion) wakes the second.
	j2, err := q.Claim(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if j2.ID != j1.ID || j2.Attempt != 2 || j2.Token() <= j1.Token() {
		t.Fatalf("second claim %+v after %+v", j2, j1)
	}
	if err := j1.Ack(testCtx(t)); !errors.Is(err, recipe.ErrClaimExpired) || !errors.Is(err, client.ErrLocked) {
		t.Fatalf("ack by the expired claim: %v, want ErrClaimExpired", err)
	}
	if err := j1.Nack(testCtx(t), errors.New("late")); !errors.Is(err, recipe.ErrClaimExpired) {
		t.Fatalf("nack by the expired claim: %v, want ErrClaimExpired", err)
	}
	if _, err := j1.Extend(testCtx(t)); !errors.Is(err, recipe.ErrClaimExpired) {
		t.Fatalf("extend by the expired claim: %v, want ErrClaimExpired", err)
	}
	if _, err := c.Put(testCtx(t), "result/job", []byte("late"), recipe.WithClaim(j1)); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("write WithClaim by the expired claim: %v, want ErrLocked", err)
	}
	if _, err := c.Put(testCtx(t), "result/job", []byte("ok"), recipe.WithClaim(j2)); err != nil {
		t.Fatal(err)
	}
	if err := j2.Ack(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if kv, err := c.Get(testCtx(t), "result/job"); err != nil || string(kv.Value) != "ok" {
		t.Fatalf("result %v %v", kv, err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{}) {
		t.Fatalf("stats %+v", st)
	}
}

func TestQueueExtendKeepsClaim(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "extend", recipe.WithVisibilityTimeout(2*time.Second))
	enqueue(t, q, "long")
	j, err := q.Claim(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := j.Extend(testCtx(t))
	if err != nil || ttl != 2*time.Second {
		t.Fatalf("extend: %v %v", ttl, err)
	}
	if held, err := j.Claimed(testCtx(t)); err != nil || !held {
		t.Fatalf("claimed after extend: %v %v", held, err)
	}
	if err := j.Ack(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestQueueNackRetriesThenDeadLetters(t *testing.T) {
	c := openStore(t)
	var attempts []int
	q := newQueue(t, c, "nack", recipe.WithBackoff(func(a int) time.Duration { attempts = append(attempts, a); return 0 }))
	id := enqueue(t, q, "flaky", recipe.WithMaxAttempts(3))
	for a := 1; a <= 3; a++ {
		j, err := q.Claim(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if j.ID != id || j.Attempt != a {
			t.Fatalf("claim %d: %+v", a, j)
		}
		if a > 1 && j.LastError != fmt.Sprintf("fail %d", a-1) {
			t.Fatalf("claim %d: last error %q", a, j.LastError)
		}
		if err := j.Nack(testCtx(t), fmt.Errorf("fail %d", a)); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(attempts) != "[1 2]" {
		t.Fatalf("backoff asked for attempts %v, want [1 2]", attempts)
	}
	if _, err := q.TryClaim(testCtx(t)); !errors.Is(err, recipe.ErrNoJob) {
		t.Fatalf("TryClaim after the last attempt: %v", err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{Dead: 1}) {
		t.Fatalf("stats %+v", st)
	}
	dead, err := q.Dead(testCtx(t), 0)
	if err != nil || len(dead) != 1 || dead[0].ID != id || dead[0].Attempt != 3 || dead[0].LastError != "fail 3" {
		t.Fatalf("dead list %+v %v", dead, err)
	}
	info, err := q.InspectDead(testCtx(t), id)
	if err != nil || string(info.Payload) != "flaky" || info.State != "dead" {
		t.Fatalf("inspect %+v %v", info, err)
	}
	if err := q.Requeue(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	if err := q.Requeue(testCtx(t), id); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("requeue twice: %v, want ErrNotFound", err)
	}
	j, err := q.TryClaim(testCtx(t))
	if err != nil || j.ID != id || j.Attempt != 1 {
		t.Fatalf("claim after requeue %+v %v", j, err)
	}
	if err := j.Nack(testCtx(t), errors.New("poison"), recipe.WithDeadLetter()); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Purge(testCtx(t), ""); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if st := stats(t, q); st != (recipe.QueueStats{}) {
		t.Fatalf("stats after purge %+v", st)
	}
}

func TestQueueNackBackoffSchedules(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "backoff")
	enqueue(t, q, "x")
	j, err := q.TryClaim(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := j.Nack(testCtx(t), errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	l, err := q.List(testCtx(t), 0)
	if err != nil || len(l) != 1 {
		t.Fatalf("list %+v %v", l, err)
	}
	// Attempt 1 backs off 1⁴ = 1s plus up to 1s of jitter.
	if l[0].State != "scheduled" || l[0].RunAt.Before(before.Add(time.Second-time.Millisecond)) || l[0].RunAt.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("after nack: %+v (nacked at %v)", l[0], before)
	}
}

func TestDefaultBackoff(t *testing.T) {
	for a, base := range map[int]time.Duration{1: time.Second, 2: 16 * time.Second, 3: 81 * time.Second, 10: 10000 * time.Second} {
		for range 50 {
			d := recipe.DefaultBackoff(a)
			if d < base || d >= base+max(base/10, time.Second) {
				t.Fatalf("DefaultBackoff(%d) = %v, want in [%v, %v)", a, d, base, base+max(base/10, time.Second))
			}
		}
	}
}

func TestQueueExpiredLastAttemptDeadLetters(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "expire-dead", recipe.WithVisibilityTimeout(time.Second))
	id := enqueue(t, q, "crashy", recipe.WithMaxAttempts(1))
	j, err := q.TryClaim(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	waitClaimEnded(t, j)
	if _, err := q.TryClaim(testCtx(t)); !errors.Is(err, recipe.ErrNoJob) {
		t.Fatalf("TryClaim after the only attempt expired: %v, want ErrNoJob", err)
	}
	dead, err := q.Dead(testCtx(t), 0)
	if err != nil || len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("dead %+v %v", dead, err)
	}
}

func TestQueueIdempotencyKey(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "idem")
	a, err := q.Enqueue(testCtx(t), []byte("1"), recipe.WithIdempotencyKey("order-42"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Enqueue(testCtx(t), []byte("2"), recipe.WithIdempotencyKey("order-42"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Duplicate || !b.Duplicate || a.ID != b.ID {
		t.Fatalf("first %+v, second %+v", a, b)
	}
	if st := stats(t, q); st.Visible != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The key is remembered after the job is done, within its window.
	j, _ := q.TryClaim(testCtx(t))
	if err := j.Ack(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if c, err := q.Enqueue(testCtx(t), []byte("3"), recipe.WithIdempotencyKey("order-42")); err != nil || c.ID != a.ID {
		t.Fatalf("after ack: %+v %v", c, err)
	}
}

func TestQueuePauseResume(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "pause")
	if err := q.Pause(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	enqueue(t, q, "held")
	if _, err := q.TryClaim(testCtx(t)); !errors.Is(err, recipe.ErrNoJob) {
		t.Fatalf("TryClaim while paused: %v", err)
	}
	if st := stats(t, q); !st.Paused || st.Visible != 1 {
		t.Fatalf("stats %+v", st)
	}
	got := make(chan error, 1)
	go func() {
		j, err := q.Claim(testCtx(t))
		if err == nil && string(j.Payload) != "held" {
			err = fmt.Errorf("claimed %q", j.Payload)
		}
		got <- err
	}()
	if err := q.Resume(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestQueueCancelReturnsJob(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "cancel")
	id := enqueue(t, q, "x")
	j, _ := q.TryClaim(testCtx(t))
	if err := j.Cancel(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := j.Ack(testCtx(t)); !errors.Is(err, recipe.ErrClaimExpired) {
		t.Fatalf("ack after cancel: %v", err)
	}
	j2, err := q.TryClaim(testCtx(t))
	if err != nil || j2.ID != id || j2.Attempt != 1 {
		t.Fatalf("claim after cancel %+v %v", j2, err)
	}
}

func TestQueueBadInput(t *testing.T) {
	c := openStore(t)
	for _, name := range []string{"", "a/b", string(make([]byte, 129))} {
		if _, err := recipe.NewQueue(c, name); !errors.Is(err, client.ErrInvalidInput) {
			t.Errorf("NewQueue(%.10q): %v", name, err)
		}
	}
	if _, err := recipe.NewQueue(c, "q", recipe.WithVisibilityTimeout(time.Millisecond)); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("tiny visibility timeout: %v", err)
	}
	q := newQueue(t, c, "bad")
	if _, err := q.Enqueue(testCtx(t), nil, recipe.WithIdempotencyKey(string(make([]byte, 300)))); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("long idempotency key: %v", err)
	}
	if _, err := q.Enqueue(testCtx(t), nil, recipe.WithMaxAttempts(0)); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("max attempts 0: %v", err)
	}
	if err := q.Requeue(testCtx(t), "nope"); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("requeue bad id: %v", err)
	}
}

// Several consumers share a queue: every job is acked exactly once, and
// every consumer gets some of them.
func TestQueueConsumersShareJobs(t *testing.T) {
	c := openStore(t)
	q := newQueue(t, c, "share")
	const jobs, consumers = 60, 4
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var mu sync.Mutex
	acked := map[string]int{}
	per := make([]int, consumers)
	var wg sync.WaitGroup
	for i := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j, err := q.Claim(ctx)
				if err != nil {
					return
				}
				if err := j.Ack(ctx); err != nil {
					t.Errorf("ack: %v", err)
					return
				}
				mu.Lock()
				acked[string(j.Payload)]++
				per[i]++
				done := len(acked) == jobs
				mu.Unlock()
				if done {
					cancel()
				}
			}
		}()
	}
	for n := range jobs {
		enqueue(t, q, fmt.Sprint(n))
	}
	wg.Wait()
	for n := range jobs {
		if acked[fmt.Sprint(n)] != 1 {
			t.Errorf("job %d acked %d times", n, acked[fmt.Sprint(n)])
		}
	}
	for i, n := range per {
		if n == 0 {
			t.Errorf("consumer %d got no job: %v", i, per)
		}
	}
}
