package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/internal/bench/runner"
)

func init() {
	Register("queue", "job queue (client/recipe.Queue): the first half of --clients enqueue, the other half claim and ack; extra reports jobs/s end to end and the claim latency from enqueue (p50/p99)", func() Workload { return &queueWorkload{} })
}

// queueName is the queue the workload uses; its keys live under
// recipe.QueuePrefix(queueName), outside --key-prefix.
const queueName = "bench"

type queueWorkload struct {
	acked atomic.Int64
	// inWindow counts the acks done within the measured duration: a
	// consumer left waiting in Claim when the producers stop ends only at
	// its op timeout, which must not dilute jobs/s.
	inWindow atomic.Int64
	window   time.Duration // 0: --total mode, no duration
	start    time.Time
	mu       sync.Mutex
	lat      runner.Histogram // claim time - enqueue time
}

func (w *queueWorkload) Setup(ctx context.Context, env *Env) error {
	// Start from an empty queue, so leftovers of an earlier run do not
	// count as claim latency.
	c := client.NewFromConn(env.WriteConn(0), nil)
	_, err := c.Delete(ctx, recipe.QueuePrefix(queueName), client.WithPrefix())
	w.start, w.window = time.Now(), env.Opts.Duration
	return err
}

func (w *queueWorkload) NewWorker(i int, env *Env) (Worker, error) {
	q, err := recipe.NewQueue(client.NewFromConn(env.WriteConn(i), nil), queueName)
	if err != nil {
		return nil, err
	}
	batch := env.Opts.QueueBatch
	if i < max(env.Opts.Clients/2, 1) {
		payload := env.Value(env.Rand(i))
		if batch > 1 {
			payloads := make([][]byte, batch)
			for k := range payloads {
				payloads[k] = payload
			}
			return WorkerFunc(func(ctx context.Context) error {
				_, err := q.EnqueueBatch(ctx, payloads)
				return err
			}), nil
		}
		return WorkerFunc(func(ctx context.Context) error {
			_, err := q.Enqueue(ctx, payload)
			return err
		}), nil
	}
	if batch > 1 && env.Opts.QueueAckClaim {
		var (
			held []*recipe.Job // claimed by the last op, acked by the next
			lats []time.Duration
		)
		return WorkerFunc(func(ctx context.Context) error {
			jobs, errs, err := q.AckClaimBatch(ctx, held, batch)
			var first error
			for k, e := range errs {
				if e != nil {
					if first == nil {
						first = e
					}
					continue
				}
				w.done(lats[k])
			}
			held, lats = jobs, lats[:0]
			for _, j := range jobs {
				lats = append(lats, time.Since(j.EnqueuedAt))
			}
			if err != nil {
				return err
			}
			return first
		}), nil
	}
	if batch > 1 {
		return WorkerFunc(func(ctx context.Context) error {
			jobs, err := q.ClaimBatch(ctx, batch)
			if err != nil {
				return err
			}
			lats := make([]time.Duration, len(jobs))
			for k, j := range jobs {
				lats[k] = time.Since(j.EnqueuedAt)
			}
			var first error
			for k, err := range q.AckBatch(ctx, jobs) {
				if err != nil {
					if first == nil {
						first = err
					}
					continue
				}
				w.done(lats[k])
			}
			return first
		}), nil
	}
	return WorkerFunc(func(ctx context.Context) error {
		j, err := q.Claim(ctx)
		if err != nil {
			return err
		}
		lat := time.Since(j.EnqueuedAt)
		if err := j.Ack(ctx); err != nil {
			return err
		}
		w.done(lat)
		return nil
	}), nil
}

// done counts one acked job whose claim came lat after its enqueue.
func (w *queueWorkload) done(lat time.Duration) {
	w.acked.Add(1)
	if w.window == 0 || time.Since(w.start) <= w.window {
		w.inWindow.Add(1)
	}
	w.mu.Lock()
	w.lat.Record(lat)
	w.mu.Unlock()
}

// Finish reports the consumers' side: jobs acked, jobs/s over the
// measured duration (over the whole run in --total mode), and the claim
// latency from enqueue.
func (w *queueWorkload) Finish(_ context.Context, _ *Env, res *Result) error {
	if res.Extra == nil {
		res.Extra = map[string]float64{}
	}
	n := w.acked.Load()
	res.Extra["jobs_acked"] = float64(n)
	if w.window > 0 {
		res.Extra["jobs_per_s"] = float64(w.inWindow.Load()) / w.window.Seconds()
	} else {
		res.Extra["jobs_per_s"] = float64(n) / time.Since(w.start).Seconds()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	res.Extra["claim_latency_p50_ms"] = float64(w.lat.Quantile(0.5).Microseconds()) / 1000
	res.Extra["claim_latency_p99_ms"] = float64(w.lat.Quantile(0.99).Microseconds()) / 1000
	return nil
}
