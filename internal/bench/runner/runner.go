package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"
)

// Worker is one client's op loop body. The runner calls Op sequentially
// from one goroutine and times each call.
type Worker interface {
	// Op performs one operation and waits for its outcome. A nil error is
	// a successful op; any other error is counted under the name the
	// run's classifier gives it.
	Op(ctx context.Context) error
}

// WorkerFunc adapts a function to Worker.
type WorkerFunc func(ctx context.Context) error

// Op calls f.
func (f WorkerFunc) Op(ctx context.Context) error { return f(ctx) }

// RunConfig says how to drive the workers. It knows nothing of the system
// under test, which is what lets bench/compare reuse it for etcd.
type RunConfig struct {
	// Workload names the run in the result and the progress line.
	Workload string
	// System names the system under test in the result ("dkv", "etcd").
	System string
	// Clients is the number of concurrent workers (goroutines).
	Clients int
	// Duration bounds the run in time; Total bounds it in ops. Exactly one
	// should be set; with both, whichever comes first ends the run.
	Duration time.Duration
	Total    int64
	// Rate, when > 0, caps the ops started per second across all workers.
	// Latency is measured from when an op is sent, not from its slot in
	// the schedule, so it is not corrected for coordinated omission.
	Rate float64
	// Progress, when set, receives a progress line every
	// ProgressInterval (default 1s).
	Progress         io.Writer
	ProgressInterval time.Duration
	// Classify names an error's status for Result.Errors. Nil uses
	// ClassifyGRPC.
	Classify func(error) string
}

// ClassifyGRPC names an error by its gRPC status code, or
// "DeadlineExceeded"/"Canceled" for context errors, or "other".
func ClassifyGRPC(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "DeadlineExceeded"
	}
	if errors.Is(err, context.Canceled) {
		return "Canceled"
	}
	if st, ok := status.FromError(err); ok {
		return st.Code().String()
	}
	return "other"
}

// Run drives cfg.Clients workers made by newWorker until the duration
// passes or Total ops have been attempted, and returns what they measured.
// An op in flight when the duration ends is allowed to finish and counts;
// elapsed time runs until the last worker stops. When ctx is canceled the
// run stops early and the result covers what completed.
func Run(ctx context.Context, cfg RunConfig, newWorker func(i int) (Worker, error)) (*Result, error) {
	if cfg.Clients <= 0 {
		return nil, fmt.Errorf("bench: clients must be > 0, got %d", cfg.Clients)
	}
	if cfg.Duration <= 0 && cfg.Total <= 0 {
		return nil, errors.New("bench: set a duration or a total op count")
	}
	classify := cfg.Classify
	if classify == nil {
		classify = ClassifyGRPC
	}
	workers := make([]Worker, cfg.Clients)
	for i := range workers {
		w, err := newWorker(i)
		if err != nil {
			return nil, fmt.Errorf("bench: worker %d: %w", i, err)
		}
		workers[i] = w
	}

	var (
		claimed  atomic.Int64 // ops started (Total mode)
		done     atomic.Int64 // ops completed, ok or not
		failed   atomic.Int64
		stopping atomic.Bool
		pace     *pacer
	)
	if cfg.Rate > 0 {
		pace = &pacer{interval: time.Duration(float64(time.Second) / cfg.Rate)}
	}
	type clientStats struct {
		hist   Histogram
		ok     int64
		errors map[string]int64
	}
	stats := make([]clientStats, cfg.Clients)

	start := time.Now()
	var timer *time.Timer
	if cfg.Duration > 0 {
		timer = time.AfterFunc(cfg.Duration, func() { stopping.Store(true) })
		defer timer.Stop()
	}
	progressDone := make(chan struct{})
	progressStopped := make(chan struct{})
	go func() {
		defer close(progressStopped)
		if cfg.Progress == nil {
			return
		}
		every := cfg.ProgressInterval
		if every <= 0 {
			every = time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-progressDone:
				return
			case now := <-t.C:
				n := done.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				fmt.Fprintf(cfg.Progress, "%6.1fs %s: %d ops, %.0f ops/s, %d errors\n",
					now.Sub(start).Seconds(), cfg.Workload, n, rate, failed.Load())
				last, lastAt = n, now
			}
		}
	}()

	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st := &stats[i]
			st.errors = map[string]int64{}
			w := workers[i]
			for !stopping.Load() && ctx.Err() == nil {
				if cfg.Total > 0 && claimed.Add(1) > cfg.Total {
					return
				}
				if pace != nil && pace.wait(ctx) != nil {
					return
				}
				t0 := time.Now()
				err := w.Op(ctx)
				lat := time.Since(t0)
				if err == nil {
					st.hist.Record(lat)
					st.ok++
				} else {
					if ctx.Err() != nil {
						// Interrupted by the caller: neither a success
						// nor the system's failure.
						return
					}
					st.errors[classify(err)]++
					failed.Add(1)
				}
				done.Add(1)
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(progressDone)
	<-progressStopped
	for _, w := range workers {
		if c, ok := w.(io.Closer); ok {
			_ = c.Close()
		}
	}

	res := &Result{
		Workload: cfg.Workload,
		System:   cfg.System,
		Clients:  cfg.Clients,
		Elapsed:  elapsed,
		Errors:   map[string]int64{},
	}
	var hist Histogram
	for i := range stats {
		hist.Merge(&stats[i].hist)
		res.OK += stats[i].ok
		for k, v := range stats[i].errors {
			res.Errors[k] += v
		}
	}
	res.setLatency(&hist)
	res.Ops = res.OK
	for _, v := range res.Errors {
		res.Ops += v
	}
	if s := elapsed.Seconds(); s > 0 {
		res.OpsPerSec = float64(res.OK) / s
	}
	return res, ctx.Err()
}

// pacer spaces op starts evenly. It does not let a stalled run burst to
// catch up.
type pacer struct {
	mu       sync.Mutex
	next     time.Time
	interval time.Duration
}

func (p *pacer) wait(ctx context.Context) error {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(p.interval)
	p.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
