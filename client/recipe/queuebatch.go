package recipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dkv-io/dkv/client"
)

// Batches: a job costs a raft entry to enqueue, one to claim and one to
// ack, and each is a round trip its caller waits for. A consumer that
// takes several jobs per claim and acks them together, and a producer
// that enqueues several per call, pay those once per batch
// (BENCHMARKS.md, "Recipes").

// MaxQueueBatch is the most jobs one ClaimBatch, AckBatch or
// EnqueueBatch call handles at once (AckBatch and EnqueueBatch split
// longer lists).
const MaxQueueBatch = client.MaxQueueBatch

// QueueBatchClaimer is the server-side batch claim (client.Client has
// it); without it ClaimBatch claims one job at a time.
type QueueBatchClaimer interface {
	QueueClaimBatch(ctx context.Context, prefix string, ttl time.Duration, max int) (*client.QueueClaimResult, error)
}

// QueueBatchAcker is the server-side batch ack (client.Client has it);
// without it AckBatch acks one job at a time.
type QueueBatchAcker interface {
	QueueAckBatch(ctx context.Context, items []client.QueueAckItem) ([]client.QueueAckOutcome, error)
}

// QueueAckClaimer is the server-side ack-then-claim (client.Client has
// it); without it AckClaimBatch is AckBatch then ClaimBatch.
type QueueAckClaimer interface {
	QueueAckClaim(ctx context.Context, prefix string, ttl time.Duration, max int, acks []client.QueueAckItem) (*client.QueueClaimResult, []client.QueueAckOutcome, error)
}

// AckClaimBatch acks done (up to MaxQueueBatch jobs claimed from q) and
// claims up to n more, in one raft command when a job is visible: a
// consumer's loop in one round trip per batch instead of two. errs[i] is
// done[i]'s outcome, exactly as AckBatch reports it; the acks apply
// whatever the claim finds. When no job is visible it then waits, as
// ClaimBatch does. jobs and err are ClaimBatch's; when err is not nil,
// the acks' outcomes are in errs all the same (client.ErrUnknownOutcome
// where they could not be learnt).
func (q *Queue) AckClaimBatch(ctx context.Context, done []*Job, n int) (jobs []*Job, errs []error, err error) {
	if n < 1 || n > MaxQueueBatch {
		return nil, nil, invalid("claim batch of %d jobs: it must be 1 to %d", n, MaxQueueBatch)
	}
	errs = make([]error, len(done))
	var pending []int
	for i, j := range done {
		if j == nil || j.q != q {
			errs[i] = invalid("ack batch: job %d is not a job claimed from queue %q", i, q.name)
			continue
		}
		pending = append(pending, i)
	}
	ac, ok := q.c.(QueueAckClaimer)
	if !ok || q.noServerClaim.Load() || len(pending) == 0 || len(done) > MaxQueueBatch {
		if len(pending) > 0 {
			sub := make([]*Job, len(pending))
			for k, i := range pending {
				sub[k] = done[i]
			}
			for k, e := range q.AckBatch(ctx, sub) {
				errs[pending[k]] = e
			}
		}
		jobs, err = q.ClaimBatch(ctx, n)
		return jobs, errs, err
	}
	items := make([]client.QueueAckItem, len(pending))
	for k, i := range pending {
		items[k] = client.QueueAckItem{Handle: done[i].Handle, MarkerKey: q.claimsPrefix() + done[i].rec.order()}
	}
	unknown := false // an earlier attempt's outcome was not learnt
	for try := 0; ; try++ {
		start := time.Now()
		res, outs, cerr := ac.QueueAckClaim(ctx, q.prefix, q.cfg.visibility, n, items)
		if status.Code(errors.Unwrap(cerr)) == codes.Unimplemented || status.Code(cerr) == codes.Unimplemented {
			q.noServerClaim.Store(true) // an older server: nothing applied
			return q.AckClaimBatch(ctx, done, n)
		}
		if cerr != nil {
			unknown = unknown || maybeApplied(cerr)
			if retryable(cerr) && try < maxWriteRetries && ctx.Err() == nil {
				continue // the acks tell whether an earlier attempt applied them
			}
			for _, i := range pending {
				errs[i] = cerr
			}
			return nil, errs, cerr
		}
		for k, i := range pending {
			errs[i] = ackOutcome(done[i], outs[k], unknown)
		}
		if res.Found {
			if jobs, err = q.takeClaimed(ctx, res, start); err != nil || len(jobs) > 0 {
				return jobs, errs, err
			}
		}
		// Nothing visible (or paused, or only spent jobs): wait as
		// ClaimBatch does, the acks done.
		jobs, err = q.claimN(ctx, n)
		return jobs, errs, err
	}
}

// ClaimBatch waits as Claim does until a job is visible, then claims up
// to n of them (1 to MaxQueueBatch) in one raft command, in claim order.
// Each job is claimed as by Claim, with its own claim and fencing token,
// and its visibility timeout runs from this claim, not from when the
// caller gets to it: take no more than the caller finishes well within
// the timeout (or Extend the ones waiting). A batch is taken by one
// consumer, so n also bounds how unevenly a burst spreads over
// consumers. Against a server without the batch claim it returns one
// job.
func (q *Queue) ClaimBatch(ctx context.Context, n int) ([]*Job, error) {
	if n < 1 || n > MaxQueueBatch {
		return nil, invalid("claim batch of %d jobs: it must be 1 to %d", n, MaxQueueBatch)
	}
	return q.claimN(ctx, n)
}

// AckBatch acks jobs (claimed from q) in as few raft commands as it can
// (one per MaxQueueBatch), each exactly as its Ack would be: errs[i] is
// jobs[i]'s outcome, nil once it is done, ErrClaimExpired if its claim
// was no longer current (that ack changed nothing; the others are not
// affected). An outcome that cannot be learnt is
// client.ErrUnknownOutcome, as for Ack.
func (q *Queue) AckBatch(ctx context.Context, jobs []*Job) []error {
	errs := make([]error, len(jobs))
	for lo := 0; lo < len(jobs); lo += MaxQueueBatch {
		hi := min(lo+MaxQueueBatch, len(jobs))
		q.ackBatch(ctx, jobs[lo:hi], errs[lo:hi])
	}
	return errs
}

func (q *Queue) ackBatch(ctx context.Context, jobs []*Job, errs []error) {
	var pending []int
	for i, j := range jobs {
		switch {
		case j == nil || j.q != q:
			errs[i] = invalid("ack batch: job %d is not a job claimed from queue %q", i, q.name)
		default:
			pending = append(pending, i)
		}
	}
	acker, ok := q.c.(QueueBatchAcker)
	if !ok || q.noServerClaim.Load() || len(pending) == 1 {
		for _, i := range pending {
			errs[i] = jobs[i].Ack(ctx)
		}
		return
	}
	unknown := make([]bool, len(jobs)) // an earlier attempt's outcome was not learnt
	for n := 0; len(pending) > 0; n++ {
		items := make([]client.QueueAckItem, len(pending))
		for k, i := range pending {
			items[k] = client.QueueAckItem{Handle: jobs[i].Handle, MarkerKey: q.claimsPrefix() + jobs[i].rec.order()}
		}
		outs, err := acker.QueueAckBatch(ctx, items)
		if status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented {
			for _, i := range pending {
				errs[i] = jobs[i].Ack(ctx) // an older server: one at a time
			}
			return
		}
		if err != nil {
			for _, i := range pending {
				unknown[i] = unknown[i] || maybeApplied(err)
			}
			if retryable(err) && n < maxWriteRetries && ctx.Err() == nil {
				continue // the same acks again; each tells whether it applied
			}
			for _, i := range pending {
				errs[i] = err
			}
			return
		}
		for k, i := range pending {
			errs[i] = ackOutcome(jobs[i], outs[k], unknown[i])
		}
		return
	}
}

// ackOutcome is what Ack would have returned for one ack of a batch (see
// Job.finish).
func ackOutcome(j *Job, o client.QueueAckOutcome, unknown bool) error {
	switch {
	case o.Err == nil && (!o.Already || unknown):
		return nil
	case o.Err == nil || errors.Is(o.Err, client.ErrLocked):
		if unknown {
			return fmt.Errorf("acking job %s: the claim is gone after an attempt whose outcome is unknown: %w", j.ID, client.ErrUnknownOutcome)
		}
		return fmt.Errorf("acking job %s: %w", j.ID, ErrClaimExpired)
	default:
		return fmt.Errorf("acking job %s: %w", j.ID, o.Err)
	}
}

// EnqueueBatch adds one job per payload, all with the same options, in
// one raft command per MaxQueueBatch payloads: each such group is added
// whole or not at all. The result is in payload order. It takes no
// idempotency key (use Enqueue for that); a call that fails with
// client.ErrUnknownOutcome may or may not have added the group it was
// on, and the groups before it were added.
func (q *Queue) EnqueueBatch(ctx context.Context, payloads [][]byte, opts ...EnqueueOption) ([]*Enqueued, error) {
	cfg := enqueueConfig{maxAttempts: q.cfg.maxAttempts}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.idemKey != "":
		return nil, invalid("enqueue batch takes no idempotency key: enqueue such jobs one by one")
	case cfg.maxAttempts < 1:
		return nil, invalid("max attempts %d: it must be at least 1", cfg.maxAttempts)
	case cfg.delay < 0:
		return nil, invalid("delay %v: it must not be negative", cfg.delay)
	}
	out := make([]*Enqueued, 0, len(payloads))
	for lo := 0; lo < len(payloads); lo += MaxQueueBatch {
		hi := min(lo+MaxQueueBatch, len(payloads))
		now := time.Now()
		runAt := now
		if !cfg.runAt.IsZero() && cfg.runAt.After(now) {
			runAt = cfg.runAt
		}
		if cfg.delay > 0 {
			runAt = now.Add(cfg.delay)
		}
		var (
			cmps []client.Cmp
			ops  []client.Op
		)
		for _, p := range payloads[lo:hi] {
			rec := &jobRecord{ID: newID(now), Payload: p, Priority: cfg.priority, RunAtMs: runAt.UnixMilli(),
				EnqueuedMs: now.UnixMilli(), MaxAttempts: cfg.maxAttempts}
			key := q.jobsPrefix() + rec.order()
			cmps = append(cmps, client.Missing(key))
			ops = append(ops, client.OpPut(key, rec.encode()))
			out = append(out, &Enqueued{ID: rec.ID})
		}
		res, err := q.c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return out[:lo], err
		}
		if !res.Succeeded {
			return out[:lo], &client.Error{Kind: client.ErrConflict, Msg: "enqueue batch: a job id was already in the queue; nothing of this group was added"}
		}
	}
	return out, nil
}
