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

// Config is one narrated run of the scenario, its workers goroutines of
// one process.
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
	first int64 // the first period's number (periods since the epoch)

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
	last := sc.first + int64(cfg.Periods) - 1
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
		name := fmt.Sprintf("worker-%d", i)
		w := &worker{name: name, c: c, prefix: cfg.Prefix, period: cfg.Period, ttl: cfg.TTL,
			from: sc.first, until: last, emit: sc.narrate(name)}
		w.stall = func(ctx context.Context, p int64, s *concurrency.Session, l *concurrency.Leadership) bool {
			if !sc.freezeHere(p) {
				return false
			}
			sc.freeze(ctx, w, p, s, l)
			return true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if err := w.run(wctx); err != nil && wctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	end := time.Unix(0, (last+1)*int64(cfg.Period))
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
		_, err := env.Client.Get(wait, fmt.Sprintf("%sruns/%012d", cfg.Prefix, last))
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
	return sc.report(ctx, env)
}

// rel is period p's number in this run (1 = the first).
func (sc *scenario) rel(p int64) int { return int(p - sc.first + 1) }

// narrate tells the worker name's events as the story's lines.
func (sc *scenario) narrate(name string) func(what string, kv ...any) {
	return func(what string, kv ...any) {
		f := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			f[fmt.Sprint(kv[i])] = kv[i+1]
		}
		p, _ := f["period"].(int64)
		log := sc.cfg.Log
		switch what {
		case "leader":
			log.Printf("%s is the leader (term %d)", name, f["term"])
			select {
			case sc.leaders <- name:
			default:
			}
		case "ran":
			sc.mu.Lock()
			sc.accepted[sc.rel(p)]++
			sc.mu.Unlock()
			log.Printf("period %d: %s ran the job", sc.rel(p), name)
		case "refused":
			log.Printf("period %d: %s is no longer the leader; its write was refused", sc.rel(p), name)
		case "deposed":
			log.Printf("%s is no longer the leader: %v", name, f["err"])
		case "retrying":
			log.Printf("%s: %s failed, trying again: %v", name, f["doing"], f["err"])
		}
	}
}

func (sc *scenario) freezeHere(p int64) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.cfg.StallIn == 0 || sc.rel(p) != sc.cfg.StallIn || sc.stalled {
		return false
	}
	sc.stalled = true
	return true
}

// freeze is the fault, played in a goroutine: the leader stops dead in
// the middle of period p, its keep-alives with it (what SIGSTOP or a
// long GC pause does; run the instances as processes to see a real
// SIGSTOP), until another worker has led and run period p; then it
// wakes and writes the result it was about to write, with its old term.
func (sc *scenario) freeze(ctx context.Context, w *worker, p int64, s *concurrency.Session, l *concurrency.Leadership) {
	log := sc.cfg.Log
	log.Printf("period %d: %s freezes before writing its result (as if SIGSTOPped); its keep-alives stop", sc.rel(p), w.name)
	froze := time.Now()
	s.Orphan() // no more keep-alives; the lease expires on its own after the TTL
	var next string
	for next == "" || next == w.name {
		select {
		case next = <-sc.leaders:
		case <-ctx.Done():
			return
		}
	}
	took := time.Since(froze)
	log.Printf("%s took over %.1fs after %s froze (TTL %v)", next, took.Seconds(), w.name, sc.cfg.TTL)
	if err := exenv.WaitFor(ctx, func() (bool, error) {
		_, err := w.c.Get(ctx, w.runKey(p))
		if errors.Is(err, client.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return
	}
	log.Printf("%s wakes up and writes its result for period %d with its old term %d", w.name, sc.rel(p), l.Term())
	_, err := w.c.Put(ctx, w.runKey(p), []byte(w.name), client.WithLock(l.Handle()))
	if err == nil {
		sc.mu.Lock()
		sc.accepted[sc.rel(p)]++
		sc.mu.Unlock()
		log.Printf("period %d: %s's late write was ACCEPTED: the job ran twice", sc.rel(p), w.name)
	} else {
		log.Printf("period %d: %s's late write was refused: %v", sc.rel(p), w.name, err)
	}
	log.Printf("%s campaigns again, as a standby with a new session", w.name)
	sc.mu.Lock()
	sc.rep.Frozen, sc.rep.TakenOverBy, sc.rep.TakeoverAfter, sc.rep.LateWrite = w.name, next, took, err
	sc.mu.Unlock()
}

func (sc *scenario) report(ctx context.Context, env *exenv.Env) (*Report, error) {
	r, err := env.Client.List(ctx, sc.cfg.Prefix+"runs/")
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	rep := sc.rep
	rep.Runs, rep.Accepted = map[int][]string{}, sc.accepted
	sc.mu.Unlock()
	for _, kv := range r.KVs {
		n, _ := strconv.ParseInt(strings.TrimPrefix(kv.Key, sc.cfg.Prefix+"runs/"), 10, 64)
		rep.Runs[sc.rel(n)] = append(rep.Runs[sc.rel(n)], string(kv.Value))
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
	log.Say("Keys: %s", sc.cfg.Prefix)
	log.Say("%s", env.Afterwards("read them", "get", sc.cfg.Prefix, "--prefix"))
	return &rep, nil
}
