package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault is one scheduled fault: at At (from the start of the run) inject
// Kind for Hold, then heal. Target picks among the candidates the
// nemesis finds at injection time (e.g. which follower).
type Fault struct {
	At     time.Duration
	Kind   string
	Target int
	Hold   time.Duration
}

func (f Fault) String() string {
	return fmt.Sprintf("%7.2fs %-18s target=%d hold=%v", f.At.Seconds(), f.Kind, f.Target, f.Hold.Round(time.Millisecond))
}

// Nemesis injects faults into one kind of cluster.
type Nemesis interface {
	// Kinds lists the fault kinds it can inject.
	Kinds() []string
	// Inject starts f and returns what heals it. It runs on the test
	// goroutine.
	Inject(ctx context.Context, f Fault) (heal func() error, err error)
	// Recover heals everything, restarts what is down and waits for a
	// leader, so the checkers see a whole cluster.
	Recover(ctx context.Context) error
	// Endpoints are the client addresses of the live members.
	Endpoints() []string
}

// Schedule derives a fault schedule from seed alone: the same seed,
// duration and kinds give the same schedule. Faults do not overlap; each
// is followed by a quiet gap so the cluster can recover and the workload
// can make progress between faults.
func Schedule(seed int64, duration time.Duration, kinds []string) []Fault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6368616f73))
	var out []Fault
	at := 500*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
	for {
		f := Fault{
			At:     at,
			Kind:   kinds[rng.IntN(len(kinds))],
			Target: rng.IntN(1 << 16),
			Hold:   time.Second + time.Duration(rng.Int64N(int64(3*time.Second))),
		}
		// Leave room to heal before the end of the run.
		if f.At+f.Hold+time.Second > duration {
			return out
		}
		out = append(out, f)
		at = f.At + f.Hold + 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
	}
}

// Suite is one run: workloads under a nemesis, then checkers.
type Suite struct {
	Seed      int64
	Duration  time.Duration
	Nemesis   Nemesis
	Workloads []Workload
	Checkers  []Checker
	// Faults, if set, replaces the seeded schedule (for tests that must
	// inject particular faults, such as the Docker test).
	Faults []Fault
	// Logf prints progress (t.Logf).
	Logf func(format string, args ...any)
}

// DefaultCheckers are the KV checkers. Lock safety, watch completeness
// and lease safety are CoordCheckers (they need CoordWorkloads' streams).
func DefaultCheckers() []Checker {
	return []Checker{Linearizability{}, Durability{}, CounterBounds{}, Convergence{}}
}

// Result is a finished run.
type Result struct {
	Stats     *Stats
	Anomalies []Anomaly
	Schedule  []Fault
}

// Run executes the suite: it starts the workloads, walks the schedule on
// the calling goroutine, stops the workloads, recovers the cluster, and
// runs every checker.
func (s *Suite) Run(ctx context.Context) Result {
	logf := s.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	stats := NewStats()
	rec := NewRecorder()
	sched := s.Faults
	if sched == nil {
		sched = Schedule(s.Seed, s.Duration, s.Nemesis.Kinds())
	}
	logf("seed %d: %d faults over %v", s.Seed, len(sched), s.Duration)

	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runAll(wctx, s.Workloads, func(w Workload) { w.Run(wctx, rec, stats) })
	}()

	start := time.Now()
	var anomalies []Anomaly
	for _, f := range sched {
		if !sleepUntil(ctx, start.Add(f.At)) {
			break
		}
		heal, err := s.Nemesis.Inject(ctx, f)
		if err != nil {
			logf("%s: not injected: %v", f, err)
			continue
		}
		stats.Fault(f.Kind)
		logf("%s", f)
		sleepUntil(ctx, time.Now().Add(f.Hold))
		if err := heal(); err != nil {
			anomalies = append(anomalies, Anomaly{Checker: "nemesis", Msg: fmt.Sprintf("healing %s: %v", f.Kind, err)})
		}
	}
	sleepUntil(ctx, start.Add(s.Duration))
	stop()
	<-done

	if err := s.Nemesis.Recover(ctx); err != nil {
		anomalies = append(anomalies, Anomaly{Checker: "recovery", Msg: err.Error()})
		return Result{Stats: stats, Anomalies: anomalies, Schedule: sched}
	}
	runAll(ctx, s.Workloads, func(w Workload) { w.Final(ctx, rec, stats) })
	r := &Run{Seed: s.Seed, History: rec, Endpoints: s.Nemesis.Endpoints(), ArtifactDir: ArtifactDir(), Stats: stats}
	for _, c := range s.Checkers {
		anomalies = append(anomalies, c.Check(ctx, r)...)
	}
	return Result{Stats: stats, Anomalies: anomalies, Schedule: sched}
}

func runAll(ctx context.Context, ws []Workload, f func(Workload)) {
	done := make(chan struct{}, len(ws))
	for _, w := range ws {
		go func() { f(w); done <- struct{}{} }()
	}
	for range ws {
		<-done
	}
}

// sleepUntil waits for a point of the schedule; false if ctx ended.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// Report formats a result for people: the numbers `make chaos` prints.
func (r Result) Report(seed int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed:              %d\n", seed)
	b.WriteString(r.Stats.Summary())
	fmt.Fprintf(&b, "anomalies:         %d\n", len(r.Anomalies))
	for _, a := range r.Anomalies {
		fmt.Fprintf(&b, "  - %s\n", a)
	}
	return b.String()
}
