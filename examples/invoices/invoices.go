package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// Config is one run of the scenario.
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
	for i := 1; i <= cfg.Invoices; i++ {
		if _, err := env.Client.Put(ctx, invoiceKey(cfg.Prefix, i), []byte("open")); err != nil {
			return nil, err
		}
	}
	sc := &scenario{cfg: cfg, accepted: map[int]int{}}
	var wg sync.WaitGroup
	errs := make([]error, cfg.Workers)
	for w := range cfg.Workers {
		c, err := env.NewClient(ctx)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[w] = sc.worker(ctx, c, fmt.Sprintf("worker-%d", w+1), w)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sc.report(ctx, env.Client)
}

func invoiceKey(prefix string, i int) string { return fmt.Sprintf("%sinvoice/%03d", prefix, i) }

// worker takes open invoices one at a time until none is left.
func (sc *scenario) worker(ctx context.Context, c *client.Client, name string, offset int) error {
	for {
		r, err := c.List(ctx, sc.cfg.Prefix+"invoice/")
		if err != nil {
			return err
		}
		var open []int
		for _, kv := range r.KVs {
			if string(kv.Value) == "open" {
				var i int
				fmt.Sscanf(strings.TrimPrefix(kv.Key, sc.cfg.Prefix+"invoice/"), "%d", &i)
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			return nil
		}
		took := false
		for j := range open {
			i := open[(j+offset)%len(open)] // workers start at different invoices
			ok, err := sc.process(ctx, c, name, i)
			if err != nil {
				return err
			}
			took = took || ok
		}
		if !took { // the open ones are locked by others: look again shortly
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// process takes invoice i if its lock is free and it is still open.
func (sc *scenario) process(ctx context.Context, c *client.Client, name string, i int) (bool, error) {
	key := invoiceKey(sc.cfg.Prefix, i)
	res, err := c.TryAcquire(ctx, key, sc.cfg.LockTTL)
	if err != nil || !res.Acquired {
		return false, err
	}
	h := res.Handle
	defer c.Release(context.WithoutCancel(ctx), h) // ErrLocked if it expired meanwhile: nothing to release
	kv, err := c.Get(ctx, key, client.WithLock(h))
	if err != nil {
		return false, err
	}
	if string(kv.Value) != "open" {
		return false, nil // paid between our list and our lock
	}
	log := sc.cfg.Log
	log.Printf("invoice %d: %s locked it (fencing token %d) and processes it", i, name, h.Token)
	time.Sleep(sc.cfg.Work) // the work itself: charging the card, rendering the PDF
	paused := sc.pauseHere(i, name)
	if paused {
		log.Printf("invoice %d: %s pauses (a GC pause, a stuck disk) for longer than the lock's %v TTL", i, name, sc.cfg.LockTTL)
		err := exenv.WaitFor(ctx, func() (bool, error) {
			kv, err := c.Get(ctx, key)
			return err == nil && string(kv.Value) != "open", err
		})
		if err != nil {
			return false, err
		}
		log.Printf("invoice %d: %s wakes up and writes its result with its expired lock", i, name)
	}
	_, err = c.Put(ctx, key, []byte("paid by "+name), client.WithLock(h))
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if paused {
		sc.rep.LateWrite = err
	}
	switch {
	case err == nil:
		sc.accepted[i]++
		log.Printf("invoice %d: %s's result is stored", i, name)
		return true, nil
	case errors.Is(err, client.ErrLocked):
		log.Printf("invoice %d: %s's result was refused: %v", i, name, err)
		return true, nil
	}
	return false, err
}

func (sc *scenario) pauseHere(i int, name string) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if i != sc.cfg.PauseOn || sc.rep.Paused != "" {
		return false
	}
	sc.rep.Paused = name
	return true
}

func (sc *scenario) report(ctx context.Context, c *client.Client) (*Report, error) {
	r, err := c.List(ctx, sc.cfg.Prefix+"invoice/")
	if err != nil {
		return nil, err
	}
	rep := sc.rep
	rep.PaidBy, rep.Accepted = map[int]string{}, sc.accepted
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
	log.Say("Keys: %s (read them with dkv get %s --prefix)", sc.cfg.Prefix, sc.cfg.Prefix)
	return &rep, nil
}
