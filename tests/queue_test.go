package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/internal/testutil"
)

var queueJobs = flag.Int("queue.jobs", 10000, "jobs in TestQueueLeaderKillsLoseNoJob")

// 10,000 jobs pushed by 4 producers and processed by 8 consumers on a
// 3-member cluster of dkv processes whose leader is killed (SIGKILL)
// twice: every job ends acked or dead-lettered, none is lost, none is
// acked twice.
func TestQueueLeaderKillsLoseNoJob(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	const producers, consumers = 4, 8
	jobs := *queueJobs
	ms := startProcCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	newQ := func() *recipe.Queue {
		cl, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		q, err := recipe.NewQueue(cl, "work", recipe.WithVisibilityTimeout(3*time.Second),
			recipe.WithBackoff(func(int) time.Duration { return 0 }))
		if err != nil {
			t.Fatal(err)
		}
		return q
	}

	var (
		mu        sync.Mutex
		confirmed = map[string]int{} // payload -> acks that returned nil
		uncertain = map[string]int{} // payload -> acks whose outcome is unknown
		pushed    atomic.Int64
		settled   atomic.Int64
	)
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	var pwg sync.WaitGroup
	for p := range producers {
		q := newQ()
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for n := p; n < jobs; n += producers {
				payload := fmt.Sprintf("job-%05d", n)
				// The idempotency key makes a retry after an unknown
				// outcome safe: the job exists once.
				for {
					_, err := q.Enqueue(pctx, []byte(payload), recipe.WithIdempotencyKey(payload))
					if err == nil {
						break
					}
					if pctx.Err() != nil {
						return
					}
					time.Sleep(50 * time.Millisecond) // back off while there is no leader
				}
				pushed.Add(1)
			}
		}()
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	var cwg sync.WaitGroup
	for range consumers {
		q := newQ()
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for cctx.Err() == nil {
				j, err := q.Claim(cctx)
				if err != nil {
					if cctx.Err() == nil {
						time.Sleep(50 * time.Millisecond)
					}
					continue
				}
				err = j.Ack(cctx)
				mu.Lock()
				switch {
				case err == nil:
					confirmed[string(j.Payload)]++
					settled.Add(1)
				case errors.Is(err, recipe.ErrClaimExpired):
					// Someone else's now; it comes back.
				default:
					uncertain[string(j.Payload)]++
				}
				mu.Unlock()
			}
		}()
	}

	go func() {
		for ctx.Err() == nil && settled.Load() < int64(jobs) {
			select {
			case <-time.After(10 * time.Second):
				t.Logf("%d pushed, %d acked", pushed.Load(), settled.Load())
			case <-ctx.Done():
			}
		}
	}()
	// Kill the leader twice while jobs flow, restarting it each time.
	for round := range 2 {
		target := int64(jobs * (round + 1) / 3)
		testutil.Eventually(t, 5*time.Minute, fmt.Sprintf("%d jobs settled", target), func() bool { return settled.Load() >= target })
		l := leaderProc(t, ms)
		t.Logf("round %d: killing leader %s with %d pushed, %d acked", round, l.Name, pushed.Load(), settled.Load())
		l.Kill()
		l.Start(t)
	}
	pwg.Wait()
	if int(pushed.Load()) != jobs {
		t.Fatalf("pushed %d of %d jobs", pushed.Load(), jobs)
	}
	check := newQ()
	testutil.Eventually(t, 5*time.Minute, "an empty queue", func() bool {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		st, err := check.Stats(sctx)
		return err == nil && st.Visible+st.Claimed+st.Scheduled == 0
	})
	ccancel()
	cwg.Wait()

	dead, err := check.Dead(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	deadSet := map[string]bool{}
	for _, d := range dead {
		deadSet[string(d.Payload)] = true
	}
	var lost, twice, resolvedUnknown int
	for n := range jobs {
		p := fmt.Sprintf("job-%05d", n)
		c, u, d := confirmed[p], uncertain[p], deadSet[p]
		switch {
		case c > 1 || (c == 1 && d):
			twice++
			t.Errorf("%s: %d confirmed acks, dead-lettered %v", p, c, d)
		case c == 0 && !d && u == 0:
			lost++
			t.Errorf("%s: neither acked nor dead-lettered", p)
		case c == 0 && !d:
			resolvedUnknown++ // its only ack's outcome was unknown; it left the queue, so that ack applied
		}
	}
	t.Logf("%d jobs: %d acked (%d by an ack whose outcome was unknown), %d dead-lettered, %d lost, %d completed twice",
		jobs, jobs-len(dead)-lost, resolvedUnknown, len(dead), lost, twice)
}
