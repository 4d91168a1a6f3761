package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// Config is one narrated run of the scenario, its workers goroutines of
// one process.
type Config struct {
	Prefix   string        // every key the scenario writes is under it
	Invoices int           // invoices to process
	Workers  int           // workers processing them
	LockTTL  time.Duration // how long a worker holds an invoice's lock without renewing it
	Work     time.Duration // how long processing one invoice takes
	PauseOn  int           // the worker that takes this invoice pauses past LockTTL (0: none)
	Log      *exenv.Log
}

// Report is what happened.
type Report struct {
	// PaidBy maps each invoice to the worker whose result the store holds.
	PaidBy map[int]string
	// Accepted counts, per invoice, the result writes the store accepted.
	Accepted map[int]int
	// Paused is the worker that paused, on invoice PauseOn; TakenBy the
	// one that processed that invoice instead.
	Paused, TakenBy string
	// LateWrite is the error the paused worker's late write got.
	LateWrite error
}

type scenario struct {
	cfg Config

	mu       sync.Mutex
	accepted map[int]int
	rep      Report
}

// Run plays the scenario on env and returns what happened.
func Run(ctx context.Context, env *exenv.Env, cfg Config) (*Report, error) {
	log := cfg.Log
	log.Say("%d workers process %d invoices. A worker locks an invoice (the lock expires", cfg.Workers, cfg.Invoices)
	log.Say("after %v unless renewed), checks it is still open, processes it and writes", cfg.LockTTL)
	log.Say("the result with the lock's handle: the store refuses that write once the lock is gone.\n")
	if _, err := seed(ctx, env.Client, cfg.Prefix, cfg.Invoices); err != nil {
		return nil, err
	}
	sc := &scenario{cfg: cfg, accepted: map[int]int{}}
	var wg sync.WaitGroup
	errs := make([]error, cfg.Workers)
	for n := range cfg.Workers {
		c, err := env.NewClient(ctx)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("worker-%d", n+1)
		w := &worker{name: name, c: c, prefix: cfg.Prefix, lockTTL: cfg.LockTTL, work: cfg.Work,
			offset: n, emit: sc.narrate(name)}
		w.pause = func(ctx context.Context, i int) { sc.pause(ctx, w, i) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[n] = w.run(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return sc.report(ctx, env)
}

// narrate tells the worker name's events as the story's lines.
func (sc *scenario) narrate(name string) func(what string, kv ...any) {
	return func(what string, kv ...any) {
		f := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			f[fmt.Sprint(kv[i])] = kv[i+1]
		}
		i, _ := f["invoice"].(int)
		log := sc.cfg.Log
		sc.mu.Lock()
		defer sc.mu.Unlock()
		late := name == sc.rep.Paused && i == sc.cfg.PauseOn
		switch what {
		case "locked":
			log.Printf("invoice %d: %s locked it (fencing token %d) and processes it", i, name, f["token"])
		case "paid":
			sc.accepted[i]++
			if late {
				sc.rep.LateWrite = nil
			}
			log.Printf("invoice %d: %s's result is stored", i, name)
		case "refused":
			if late {
				sc.rep.LateWrite, _ = f["err"].(error)
			}
			log.Printf("invoice %d: %s's result was refused: %v", i, name, f["err"])
		case "retrying":
			log.Printf("%s: %s failed, trying again: %v", name, f["doing"], f["err"])
		}
	}
}

// pause is the fault, played in a goroutine: the worker that has
// processed invoice PauseOn pauses before writing its result (a GC
// pause, a stuck disk; run the instances as processes to see a real
// SIGSTOP) until another worker has processed it.
func (sc *scenario) pause(ctx context.Context, w *worker, i int) {
	sc.mu.Lock()
	if i != sc.cfg.PauseOn || sc.rep.Paused != "" {
		sc.mu.Unlock()
		return
	}
	sc.rep.Paused = w.name
	sc.mu.Unlock()
	log := sc.cfg.Log
	log.Printf("invoice %d: %s pauses (a GC pause, a stuck disk) for longer than the lock's %v TTL", i, w.name, sc.cfg.LockTTL)
	_ = exenv.WaitFor(ctx, func() (bool, error) {
		kv, err := w.c.Get(ctx, invoiceKey(sc.cfg.Prefix, i))
		return err == nil && string(kv.Value) != "open", err
	})
	log.Printf("invoice %d: %s wakes up and writes its result with its expired lock", i, w.name)
}

func (sc *scenario) report(ctx context.Context, env *exenv.Env) (*Report, error) {
	r, err := env.Client.List(ctx, sc.cfg.Prefix+"invoice/")
	if err != nil {
		return nil, err
	}
	sc.mu.Lock()
	rep := sc.rep
	rep.PaidBy, rep.Accepted = map[int]string{}, sc.accepted
	sc.mu.Unlock()
	log := sc.cfg.Log
	log.Say("\nThe invoices as the store holds them:")
	for _, kv := range r.KVs {
		var i int
		fmt.Sscanf(strings.TrimPrefix(kv.Key, sc.cfg.Prefix+"invoice/"), "%d", &i)
		rep.PaidBy[i] = strings.TrimPrefix(string(kv.Value), "paid by ")
		log.Say("  invoice %d: %s (results accepted: %d)", i, kv.Value, rep.Accepted[i])
		if i == sc.cfg.PauseOn {
			rep.TakenBy = rep.PaidBy[i]
		}
	}
	if rep.Paused != "" {
		log.Say("%s paused on invoice %d; %s processed it; the paused worker's late write: %v",
			rep.Paused, sc.cfg.PauseOn, rep.TakenBy, rep.LateWrite)
	}
	log.Say("Keys: %s", sc.cfg.Prefix)
	log.Say("%s", env.Afterwards("read them", "get", sc.cfg.Prefix, "--prefix"))
	return &rep, nil
}

// instance is one worker as a process of its own: it seeds the invoices
// that do not exist yet, then processes open ones until SIGTERM.
func instance(ctx context.Context, in *exenv.Instance, n int, lockTTL, work time.Duration) error {
	prefix := "examples/invoices/" + in.Run + "/"
	created, err := seed(ctx, in.Client, prefix, n)
	if err != nil {
		return err
	}
	in.Emit("seeded", "invoices", n, "new", created)
	w := &worker{name: in.Name, c: in.Client, prefix: prefix, lockTTL: lockTTL, work: work,
		offset: offsetOf(in.Name), forever: true, emit: in.Emit}
	return w.run(ctx)
}
