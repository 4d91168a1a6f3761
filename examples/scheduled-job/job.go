package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// Config is one run of the scenario.
type Config struct {
	Prefix  string        // every key the scenario writes is under it
	Workers int           // how many workers campaign
	Period  time.Duration // the job runs once per period
	TTL     time.Duration // the workers' session TTL: how long a frozen leader keeps the leadership
	Periods int           // how many periods the scenario lasts
	StallIn int           // the leader freezes while running the StallIn-th period (1-based); 0: never
	Log     *exenv.Log
}

// Report is what happened.
type Report struct {
	// Runs maps each period (numbered from 1) to the workers whose run of
	// it the store accepted, as read back from the store.
	Runs map[int][]string
	// Accepted counts, per period, the job writes the store accepted.
	Accepted map[int]int
	// Frozen is the worker that froze, TakenOverBy the one that led next,
	// after TakeoverAfter.
	Frozen, TakenOverBy string
	TakeoverAfter       time.Duration
	// LateWrite is the error the frozen worker's late write got.
	LateWrite error
}

type scenario struct {
	cfg   Config
	first int64 // the first period's number (wall-clock periods since the epoch)

	mu       sync.Mutex
	accepted map[int]int
	leaders  chan string // every newly elected leader's name
	stalled  bool
	rep      Report
}

// Run plays the scenario on env and returns what happened.
func Run(ctx context.Context, env *exenv.Env, cfg Config) (*Report, error) {
	log := cfg.Log
	log.Say("%d workers share a job that must run once every %v. They elect a leader on", cfg.Workers, cfg.Period)
	log.Say("sessions with a %v TTL; only the leader runs the job, and it writes each", cfg.TTL)
	log.Say("period's result fenced by its term, so a deposed leader cannot write.\n")
	sc := &scenario{cfg: cfg, accepted: map[int]int{}, leaders: make(chan string, 16)}
	sc.first = time.Now().UnixNano()/int64(cfg.Period) + 1
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers)
	for i := 1; i <= cfg.Workers; i++ {
		c, err := env.NewClient(ctx)
		if err != nil {
			stop()
			wg.Wait()
			return nil, err
		}
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			defer c.Close()
			if err := sc.worker(wctx, c, name); err != nil && wctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}(fmt.Sprintf("worker-%d", i))
	}
	end := time.Unix(0, (sc.first+int64(cfg.Periods))*int64(cfg.Period))
	select {
	case <-time.After(time.Until(end)):
	case err := <-errs:
		stop()
		wg.Wait()
		return nil, err
	case <-ctx.Done():
	}
	// A leader running late (a loaded machine) still owes the last period.
	wait, cancel := context.WithTimeout(ctx, 10*cfg.TTL)
	err := exenv.WaitFor(wait, func() (bool, error) {
		_, err := env.Client.Get(wait, sc.runKey(cfg.Periods))
		if errors.Is(err, client.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	})
	cancel()
	stop()
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("waiting for the last period's run: %w", err)
	}
	return sc.report(ctx, env.Client)
}

func (sc *scenario) runKey(p int) string { return fmt.Sprintf("%sruns/%06d", sc.cfg.Prefix, p) }

// period is the scenario's number of the period at time t (1 = the first).
func (sc *scenario) period(t time.Time) int {
	return int(t.UnixNano()/int64(sc.cfg.Period) - sc.first + 1)
}

// worker campaigns, leads while elected, and campaigns again after
// losing the leadership, until ctx ends.
func (sc *scenario) worker(ctx context.Context, c *client.Client, name string) error {
	for ctx.Err() == nil {
		s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(sc.cfg.TTL))
		if err != nil {
			return err
		}
		l, err := concurrency.NewElection(s, sc.cfg.Prefix+"leader").Campaign(ctx, []byte(name))
		if err != nil {
			s.Close()
			return err
		}
		sc.cfg.Log.Printf("%s is the leader (term %d)", name, l.Term())
		select {
		case sc.leaders <- name:
		default:
		}
		froze, err := sc.lead(ctx, c, name, s, l)
		if froze && ctx.Err() == nil {
			sc.cfg.Log.Printf("%s campaigns again, as a standby with a new session", name)
		}
		if !froze {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = l.Resign(rctx)
			cancel()
			s.Close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// lead runs every due period's job until the leadership is lost or ctx
// ends. froze reports that this worker froze (its session is gone).
func (sc *scenario) lead(ctx context.Context, c *client.Client, name string, s *concurrency.Session, l *concurrency.Leadership) (froze bool, err error) {
	for {
		last, err := sc.lastRun(ctx, c, l)
		if errors.Is(err, client.ErrLocked) {
			return false, nil // deposed: the fenced read says so
		}
		if err != nil {
			return false, ctxOr(ctx, err)
		}
		now := sc.period(time.Now())
		for p := max(last+1, 1); p <= now && p <= sc.cfg.Periods; p++ {
			if sc.freezeHere(p) {
				return true, sc.freeze(ctx, c, name, p, s, l)
			}
			_, err := c.Put(ctx, sc.runKey(p), []byte(name), client.IfAbsent(), client.WithLock(l.Handle()))
			switch {
			case err == nil:
				sc.mu.Lock()
				sc.accepted[p]++
				sc.mu.Unlock()
				sc.cfg.Log.Printf("period %d: %s ran the job", p, name)
			case errors.Is(err, client.ErrLocked):
				sc.cfg.Log.Printf("period %d: %s is no longer the leader; its write was refused", p, name)
				return false, nil
			case errors.Is(err, client.ErrConflict):
				sc.cfg.Log.Printf("period %d: already done, %s skips it", p, name)
			default:
				return false, ctxOr(ctx, err)
			}
		}
		next := time.Unix(0, (sc.first+int64(now))*int64(sc.cfg.Period))
		select {
		case <-ctx.Done():
			return false, nil
		case <-l.Done():
			sc.cfg.Log.Printf("%s lost the leadership", name)
			return false, nil
		case <-time.After(time.Until(next)):
		}
	}
}

// lastRun is the last period whose job ran, read fenced by l.
func (sc *scenario) lastRun(ctx context.Context, c *client.Client, l *concurrency.Leadership) (int, error) {
	r, err := c.List(ctx, sc.cfg.Prefix+"runs/", client.WithKeysOnly(), client.WithLock(l.Handle()))
	if err != nil {
		return 0, err
	}
	last := 0
	for _, kv := range r.KVs {
		n, _ := strconv.Atoi(strings.TrimPrefix(kv.Key, sc.cfg.Prefix+"runs/"))
		last = max(last, n)
	}
	return last, nil
}

func (sc *scenario) freezeHere(p int) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.cfg.StallIn == 0 || p != sc.cfg.StallIn || sc.stalled {
		return false
	}
	sc.stalled = true
	return true
}

// freeze is the fault: the leader stops dead in the middle of period p,
// its keep-alives with it (what SIGSTOP or a long GC pause does), until
// another worker has led and run period p; then it wakes and writes the
// result it was about to write, with its old term.
func (sc *scenario) freeze(ctx context.Context, c *client.Client, name string, p int, s *concurrency.Session, l *concurrency.Leadership) error {
	log := sc.cfg.Log
	log.Printf("period %d: %s freezes before writing its result (as if SIGSTOPped); its keep-alives stop", p, name)
	froze := time.Now()
	s.Orphan() // no more keep-alives; the lease expires on its own after the TTL
	var next string
	for next == "" || next == name {
		select {
		case next = <-sc.leaders:
		case <-ctx.Done():
			return nil
		}
	}
	took := time.Since(froze)
	log.Printf("%s took over %.1fs after %s froze (TTL %v)", next, took.Seconds(), name, sc.cfg.TTL)
	if err := exenv.WaitFor(ctx, func() (bool, error) {
		_, err := c.Get(ctx, sc.runKey(p))
		if errors.Is(err, client.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return ctxOr(ctx, err)
	}
	log.Printf("%s wakes up and writes its result for period %d with its old term %d", name, p, l.Term())
	_, err := c.Put(ctx, sc.runKey(p), []byte(name), client.IfAbsent(), client.WithLock(l.Handle()))
	if err == nil {
		sc.mu.Lock()
		sc.accepted[p]++
		sc.mu.Unlock()
		log.Printf("period %d: %s's late write was ACCEPTED: the job ran twice", p, name)
	} else {
		log.Printf("period %d: %s's late write was refused: %v", p, name, err)
	}
	sc.mu.Lock()
	sc.rep.Frozen, sc.rep.TakenOverBy, sc.rep.TakeoverAfter, sc.rep.LateWrite = name, next, took, err
	sc.mu.Unlock()
	return nil
}

func (sc *scenario) report(ctx context.Context, c *client.Client) (*Report, error) {
	r, err := c.List(ctx, sc.cfg.Prefix+"runs/")
	if err != nil {
		return nil, err
	}
	rep := sc.rep
	rep.Runs, rep.Accepted = map[int][]string{}, sc.accepted
	for _, kv := range r.KVs {
		n, _ := strconv.Atoi(strings.TrimPrefix(kv.Key, sc.cfg.Prefix+"runs/"))
		rep.Runs[n] = append(rep.Runs[n], string(kv.Value))
	}
	log := sc.cfg.Log
	log.Say("\nWhat the store holds (one key per period, written by the leader of the time):")
	var ps []int
	for p := range rep.Runs {
		ps = append(ps, p)
	}
	sort.Ints(ps)
	for _, p := range ps {
		log.Say("  period %d: run by %s (writes accepted: %d)", p, strings.Join(rep.Runs[p], ", "), rep.Accepted[p])
	}
	if rep.Frozen != "" {
		log.Say("%s froze; %s took over after %.1fs; the frozen leader's late write: %v",
			rep.Frozen, rep.TakenOverBy, rep.TakeoverAfter.Seconds(), rep.LateWrite)
	}
	log.Say("Keys: %s (read them with dkv get %s --prefix)", sc.cfg.Prefix, sc.cfg.Prefix)
	return &rep, nil
}

func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
