package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// consumer is one consumer as a process of its own (--instance): it
// claims invoices from the queue and charges each, until SIGTERM. A job
// is two steps, each taking half of work: charge the card (recorded as
// the job's result, written IfAbsent under the claim), then send the
// receipt; only then is it acked. Whatever point a consumer dies at, the
// job is not lost (it is acked only when done: a claim that is never
// acked expires and the job is claimed again) and the card is charged
// once (a later attempt finds the result already there and only sends
// the receipt and acks). While it works it renews its claim (a
// heartbeat); a consumer killed or frozen stops renewing, and its claim
// expires after the visibility timeout.
type consumer struct {
	q          *recipe.Queue
	c          *client.Client
	results    string // key prefix of the charges
	work       time.Duration
	visibility time.Duration
	emit       func(what string, kv ...any)
}

func newConsumer(in *exenv.Instance, o options, work time.Duration) (*consumer, error) {
	q, err := recipe.NewQueue(in.Client, "examples-jobqueue-"+in.Run,
		recipe.WithVisibilityTimeout(o.visibility),
		recipe.WithDefaultMaxAttempts(o.maxAttempts),
		recipe.WithBackoff(func(attempt int) time.Duration { return time.Duration(attempt) * o.backoff }))
	if err != nil {
		return nil, err
	}
	return &consumer{q: q, c: in.Client, results: "examples/jobqueue/" + in.Run + "/results/", work: work,
		visibility: o.visibility, emit: in.Emit}, nil
}

// enqueue adds invoices 1 to n, each once however often it is called:
// the invoice's name is its idempotency key.
func (cs *consumer) enqueue(ctx context.Context, n int) error {
	added := 0
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("invoice-%d", i)
		e, err := cs.q.Enqueue(ctx, []byte(name), recipe.WithIdempotencyKey(name))
		if err != nil {
			return err
		}
		if !e.Duplicate {
			added++
		}
	}
	cs.emit("enqueued", "jobs", n, "new", added)
	return nil
}

// run claims and runs jobs until ctx ends; a job it holds then is given
// back (Cancel: visible again at once, without using an attempt).
func (cs *consumer) run(ctx context.Context) error {
	for {
		job, err := cs.q.Claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A leader change, say. A claim whose outcome is unknown may
			// have taken a job: it is visible again after the visibility
			// timeout, with that attempt used.
			cs.emit("retrying", "doing", "claim", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		name := string(job.Payload)
		cs.emit("claimed", "job", name, "attempt", job.Attempt, "token", job.Token())
		if err := cs.runJob(ctx, job, name); err != nil {
			if ctx.Err() == nil {
				cs.emit("error", "job", name, "err", err)
				continue
			}
			cctx, cancel := exenv.CleanupContext()
			if err := job.Cancel(cctx); err == nil {
				cs.emit("returned", "job", name)
			}
			cancel()
			return nil
		}
	}
}

// runJob charges the card once, sends the receipt and acks, renewing
// the claim meanwhile.
func (cs *consumer) runJob(ctx context.Context, job *recipe.Job, name string) error {
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for sleep(hctx, cs.visibility/3) == nil {
			if _, err := job.Extend(hctx); errors.Is(err, recipe.ErrClaimExpired) {
				return // the job's Put or Ack says so
			}
		}
	}()
	if err := sleep(ctx, cs.work/2); err != nil {
		return err
	}
	_, err := cs.c.Put(ctx, cs.results+name, []byte(fmt.Sprintf("charged on attempt %d", job.Attempt)),
		client.IfAbsent(), recipe.WithClaim(job))
	switch {
	case err == nil:
		cs.emit("charged", "job", name, "attempt", job.Attempt)
	case errors.Is(err, client.ErrConflict):
		kv, gerr := cs.c.Get(ctx, cs.results+name)
		if gerr != nil {
			return gerr
		}
		cs.emit("already-charged", "job", name, "attempt", job.Attempt, "result", string(kv.Value))
	case errors.Is(err, client.ErrLocked):
		cs.emit("refused", "job", name, "attempt", job.Attempt, "err", err)
		return nil // the claim expired: the job is someone else's now
	default:
		return err
	}
	if err := sleep(ctx, cs.work/2); err != nil { // sending the receipt
		return err
	}
	if err := job.Ack(ctx); err != nil {
		if errors.Is(err, recipe.ErrClaimExpired) {
			cs.emit("refused", "job", name, "attempt", job.Attempt, "err", err)
			return nil
		}
		return err
	}
	cs.emit("done", "job", name, "attempt", job.Attempt)
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
