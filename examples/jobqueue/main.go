// Command jobqueue shows a job queue with retries and a dead-letter list:
// three workers process invoices from a recipe.Queue.
//
// With no --instance it plays the whole story in one process. Some
// invoices fail and are retried with backoff, one worker freezes while
// holding a job (its claim expires and another worker takes the job
// over), a poison invoice that always fails ends in the dead-letter list
// after its attempts, and, once fixed, is requeued from there and
// processed.
//
// The queue's claim is a store-enforced lock on a lease whose TTL is the
// visibility timeout: a worker that stops renewing it loses the job, and
// its late Ack, or any write it makes WithClaim(job), is refused.
//
// With --instance NAME the process is one consumer, until SIGTERM (see
// instance.go); kill -9 consumers mid-job to see that no job is lost and
// none charged twice (go run ./examples/run jobqueue does it for you).
//
//	go run ./examples/jobqueue
//	go run ./examples/jobqueue --endpoints 127.0.0.1:17861,127.0.0.1:17871,127.0.0.1:17881
//	go run ./examples/jobqueue --endpoints ... --instance w1 --enqueue 10
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	var o options
	flag.IntVar(&o.jobs, "jobs", 8, "invoices to enqueue (at least 6: invoices 2, 3, 5 and 6 play the faults of the narrated run)")
	flag.DurationVar(&o.visibility, "visibility", 2*time.Second, "visibility timeout: how long a claim lasts without renewal")
	flag.IntVar(&o.maxAttempts, "max-attempts", 3, "attempts before a job goes to the dead-letter list")
	flag.DurationVar(&o.backoff, "backoff", 300*time.Millisecond, "retry delay after attempt n is n × this")
	enqueue := flag.Int("enqueue", 0, "with --instance: enqueue invoices 1 to N first (each once, however many instances do)")
	work := flag.Duration("work", 2*time.Second, "with --instance: how long a job takes: half charging the card, half sending the receipt")
	exenv.MainInstances(func(ctx context.Context, env *exenv.Env) error {
		if o.jobs < 6 || o.maxAttempts < 3 {
			return errors.New("--jobs must be at least 6 and --max-attempts at least 3 for the script to play")
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		o.queue, o.results, o.out = "examples-jobqueue-"+env.Run, "examples/jobqueue/"+env.Run+"/results/", os.Stdout
		_, err := run(ctx, env.Client, o)
		return err
	}, func(ctx context.Context, in *exenv.Instance) error {
		cs, err := newConsumer(in, o, *work)
		if err != nil {
			return err
		}
		if *enqueue > 0 {
			if err := cs.enqueue(ctx, *enqueue); err != nil {
				return err
			}
		}
		return cs.run(ctx)
	})
}

type options struct {
	jobs        int
	visibility  time.Duration
	maxAttempts int
	backoff     time.Duration
	queue       string
	results     string // key prefix of the invoices' results
	out         io.Writer
}

// The invoices that play the faults.
const (
	frozenJob  = "invoice-2" // the first worker to claim it freezes holding it
	flakyOnce  = "invoice-3" // fails its first attempt
	flakyTwice = "invoice-5" // fails its first two attempts
	poisonJob  = "invoice-6" // fails every attempt until fixed
)

// process is the work: it fails as the script says.
func process(name string, attempt int, fixed bool) error {
	switch {
	case name == flakyOnce && attempt < 2, name == flakyTwice && attempt < 3:
		return errors.New("payment gateway timed out")
	case name == poisonJob && !fixed:
		return errors.New("malformed billing address")
	}
	return nil
}

// result is what the run saw.
type result struct {
	acks      map[string]int      // successful Acks by invoice
	claimedBy map[string][]string // the workers that claimed each invoice, in order
	ackedBy   map[string]string
	frozen    string // the worker that froze
	// deadBeforeRequeue is the dead-letter list before the requeue.
	deadBeforeRequeue []recipe.JobInfo
	lateAckErr        error // the frozen worker's Ack after the take-over
	final             *recipe.QueueStats
	results           int // result keys written (WithClaim)
}

func run(ctx context.Context, c *client.Client, o options) (*result, error) {
	q, err := recipe.NewQueue(c, o.queue,
		recipe.WithVisibilityTimeout(o.visibility),
		recipe.WithDefaultMaxAttempts(o.maxAttempts),
		recipe.WithBackoff(func(attempt int) time.Duration { return time.Duration(attempt) * o.backoff }))
	if err != nil {
		return nil, err
	}
	res := &result{acks: map[string]int{}, claimedBy: map[string][]string{}, ackedBy: map[string]string{}}
	var mu sync.Mutex // guards res
	notify := make(chan struct{}, 1)
	log := exenv.NewLog(o.out)
	var fixed, froze atomic.Bool
	frozenJobC := make(chan *recipe.Job, 1)

	for i := 1; i <= o.jobs; i++ {
		if _, err := q.Enqueue(ctx, []byte(fmt.Sprintf("invoice-%d", i))); err != nil {
			return nil, err
		}
	}
	log.Say("queue %s: %d invoices; 3 workers; visibility timeout %v, %d attempts, backoff n × %v",
		o.queue, o.jobs, o.visibility, o.maxAttempts, o.backoff)

	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	worker := func(me string) {
		defer wg.Done()
		for {
			job, err := q.Claim(wctx)
			if err != nil {
				if wctx.Err() != nil {
					return
				}
				// A leader change, say. A claim whose outcome is unknown
				// may have taken a job: it is visible again after the
				// visibility timeout, with that attempt used.
				log.Printf("%s: claim failed, trying again: %v", me, err)
				select {
				case <-time.After(200 * time.Millisecond):
				case <-wctx.Done():
					return
				}
				continue
			}
			name := string(job.Payload)
			mu.Lock()
			res.claimedBy[name] = append(res.claimedBy[name], me)
			mu.Unlock()
			if name == frozenJob && froze.CompareAndSwap(false, true) {
				mu.Lock()
				res.frozen = me
				log.Printf("%s claimed %s (attempt %d) and freezes holding it: no ack, no renewal", me, name, job.Attempt)
				mu.Unlock()
				frozenJobC <- job
				return // this worker is gone
			}
			if err := process(name, job.Attempt, fixed.Load()); err != nil {
				last := job.Attempt >= job.MaxAttempts
				nerr := job.Nack(wctx, err)
				mu.Lock()
				switch {
				case nerr != nil:
					log.Printf("%s: nack of %s failed: %v", me, name, nerr)
				case last:
					log.Printf("%s: %s failed attempt %d (%v): moved to the dead-letter list", me, name, job.Attempt, err)
				default:
					log.Printf("%s: %s failed attempt %d (%v): retry in %v", me, name, job.Attempt, err, time.Duration(job.Attempt)*o.backoff)
				}
				mu.Unlock()
				signal(notify)
				continue
			}
			// The result is written under the claim: refused if the claim
			// was lost meanwhile.
			_, werr := c.Put(wctx, o.results+name, []byte("paid by "+me), recipe.WithClaim(job))
			if werr == nil {
				werr = job.Ack(wctx)
			}
			mu.Lock()
			if werr != nil {
				log.Printf("%s: %s not completed: %v", me, name, werr)
			} else {
				res.acks[name]++
				res.ackedBy[name] = me
				log.Printf("%s: %s done on attempt %d", me, name, job.Attempt)
			}
			mu.Unlock()
			signal(notify)
		}
	}
	for _, w := range []string{"worker-1", "worker-2", "worker-3"} {
		wg.Add(1)
		go worker(w)
	}
	defer func() { stopWorkers(); wg.Wait() }()

	// waitFor waits until cond holds (checked under mu after each outcome).
	waitFor := func(what string, cond func() bool) error {
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return nil
			}
			select {
			case <-notify:
			case <-ctx.Done():
				return fmt.Errorf("waiting until %s: %w", what, ctx.Err())
			}
		}
	}
	dead := func(name string) bool {
		// Dead-lettering is logged by the worker that nacked the last
		// attempt; the list itself is the truth.
		infos, err := q.Dead(ctx, 0)
		for _, in := range infos {
			if err == nil && string(in.Payload) == name {
				return true
			}
		}
		return false
	}
	allSettled := func() bool {
		for i := 1; i <= o.jobs; i++ {
			if name := fmt.Sprintf("invoice-%d", i); name != poisonJob && res.acks[name] == 0 {
				return false
			}
		}
		return dead(poisonJob)
	}
	if err := waitFor("every invoice is done or dead", allSettled); err != nil {
		return nil, err
	}

	// The frozen worker wakes up and tries to finish its job.
	fj := <-frozenJobC
	res.lateAckErr = fj.Ack(ctx)
	mu.Lock()
	log.Printf("%s wakes up and acks %s: %v", res.frozen, fj.Payload, verdict(res.lateAckErr))
	mu.Unlock()

	if res.deadBeforeRequeue, err = q.Dead(ctx, 0); err != nil {
		return nil, err
	}
	for _, in := range res.deadBeforeRequeue {
		log.Say("dead-letter list: %s %s after %d attempts (%s)", in.ID, in.Payload, in.Attempt, in.LastError)
	}
	fixed.Store(true)
	for _, in := range res.deadBeforeRequeue {
		log.Printf("the billing address is fixed; requeue %s from the dead-letter list", in.Payload)
		if err := q.Requeue(ctx, in.ID); err != nil {
			return nil, err
		}
	}
	if err := waitFor(poisonJob+" is done", func() bool { return res.acks[poisonJob] > 0 }); err != nil {
		return nil, err
	}
	stopWorkers()
	wg.Wait()

	if res.final, err = q.Stats(ctx); err != nil {
		return nil, err
	}
	rr, err := c.List(ctx, o.results, client.WithCountOnly())
	if err != nil {
		return nil, err
	}
	res.results = int(rr.Count)

	fmt.Fprintf(o.out, "\n  %-10s %-40s %s\n", "invoice", "claimed by (one per attempt)", "acked")
	for i := 1; i <= o.jobs; i++ {
		name := fmt.Sprintf("invoice-%d", i)
		fmt.Fprintf(o.out, "  %-10s %-40s %d× by %s\n", name, strings.Join(res.claimedBy[name], " "), res.acks[name], res.ackedBy[name])
	}
	fmt.Fprintf(o.out, "queue now: %d visible, %d claimed, %d scheduled, %d dead; %d results written\n",
		res.final.Visible, res.final.Claimed, res.final.Scheduled, res.final.Dead, res.results)
	if _, err := c.Delete(ctx, o.results, client.WithPrefix()); err != nil {
		return nil, err
	}
	return res, nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func verdict(err error) string {
	switch {
	case err == nil:
		return "accepted (this should not happen)"
	case errors.Is(err, recipe.ErrClaimExpired):
		return "refused, its claim expired and the job was done by another worker"
	}
	return err.Error()
}
