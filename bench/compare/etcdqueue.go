package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

// etcdQueuePrefix is where etcd's recipe.Queue keeps the queue row's jobs
// (<prefix>/<enqueue nanos>).
const etcdQueuePrefix = keyPrefix + "queue"

// etcdQueueStop is what finish enqueues to wake Dequeues still waiting.
const etcdQueueStop = "compare-queue-stop"

// etcdQueue is the queue row through etcd's experimental
// recipe.Queue, as dkv bench's queue workload: the first half of the
// clients Enqueue, the other half Dequeue. Dequeue deletes the job as it
// returns it (there is no ack), so a consumer that dies holding a job
// loses it; DKV's Claim + Ack keeps it until acked. Values carry their
// enqueue time, for the claim latency.
//
// recipe.Queue takes no context: a Dequeue waiting on an empty queue
// when its op times out keeps waiting in its goroutine, and finish wakes
// every such one with a stop value before the clients close (a Dequeue
// whose watch is closed under it dereferences a nil event).
func etcdQueue(ctx context.Context, w workload, c config, clients []*clientv3.Client, seed uint64) (*sysWorkload, error) {
	if _, err := clients[0].Delete(ctx, etcdQueuePrefix+"/", clientv3.WithPrefix()); err != nil {
		return nil, err
	}
	nclients, _ := w.params(c)
	producers := max(nclients/2, 1)
	var (
		acked, inWindow atomic.Int64
		waiting         atomic.Int64 // Dequeue goroutines not yet returned
		dequeues        sync.WaitGroup
		mu              sync.Mutex
		lat             runner.Histogram
	)
	start := time.Now()
	return &sysWorkload{
		newWorker: func(i int) (runner.Worker, error) {
			q := recipe.NewQueue(clients[i%len(clients)], etcdQueuePrefix)
			if i < producers {
				filler := []byte(value(rand.New(rand.NewPCG(seed, uint64(i))), c.valueSize))
				return runner.WorkerFunc(func(context.Context) error {
					return q.Enqueue(string(runner.StampValue(filler, time.Now())))
				}), nil
			}
			return runner.WorkerFunc(func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
				defer cancel()
				type dequeued struct {
					v   string
					err error
				}
				got := make(chan dequeued, 1)
				waiting.Add(1)
				dequeues.Add(1)
				go func() {
					defer dequeues.Done()
					defer waiting.Add(-1)
					v, err := q.Dequeue()
					got <- dequeued{v, err}
				}()
				select {
				case d := <-got:
					if d.err != nil {
						return d.err
					}
					if t, ok := runner.ParseStamp([]byte(d.v)); ok {
						mu.Lock()
						lat.Record(time.Since(t))
						mu.Unlock()
					}
					acked.Add(1)
					if time.Since(start) <= c.duration {
						inWindow.Add(1)
					}
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}), nil
		},
		finish: func(ctx context.Context, res *runner.Result) error {
			if res.Extra == nil {
				res.Extra = map[string]float64{}
			}
			res.Extra["jobs_acked"] = float64(acked.Load())
			res.Extra["jobs_per_s"] = float64(inWindow.Load()) / c.duration.Seconds()
			mu.Lock()
			res.Extra["claim_latency_p50_ms"] = float64(lat.Quantile(0.5).Microseconds()) / 1000
			res.Extra["claim_latency_p99_ms"] = float64(lat.Quantile(0.99).Microseconds()) / 1000
			mu.Unlock()
			// One stop value per waiting Dequeue wakes them all (each
			// takes one; more are harmless: the prefix is deleted).
			q := recipe.NewQueue(clients[0], etcdQueuePrefix)
			for range waiting.Load() {
				if err := q.Enqueue(etcdQueueStop); err != nil {
					return fmt.Errorf("waking waiting Dequeues: %w", err)
				}
			}
			done := make(chan struct{})
			go func() { dequeues.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(etcdOpTimeout):
				return errors.New("Dequeues still waiting after their stop values")
			}
			dctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
			defer cancel()
			_, err := clients[0].Delete(dctx, etcdQueuePrefix+"/", clientv3.WithPrefix())
			return err
		},
	}, nil
}
