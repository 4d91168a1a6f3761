package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Recorder streams of IncrementWorkload.
const (
	IncrementStream      = "increment"
	IncrementFinalStream = "increment-final"
)

// Increment is one increment of an unbounded counter and its outcome
// ("ok", "unknown" or "failed", as outcome classifies it).
type Increment struct {
	Key     string
	Outcome string
}

// IncrementFinal is a counter's value read after the faults healed.
type IncrementFinal struct {
	Key   string
	Value int64
	Err   string // the read failed: no check for this key
}

// IncrementWorkload has several workers on each client add 1 to a few
// unbounded counters through every fault, and records each increment's
// outcome. With client sessions, a write whose reply was lost is sent
// again and applies once, so a counter ends equal to its acknowledged
// increments plus at most those whose outcome stayed unknown (the
// caller's deadline passed first); more is an increment applied twice.
type IncrementWorkload struct {
	Clients   []*client.Client
	Workers   int // per client, default 2
	Keys      int // counters, default 3
	OpTimeout time.Duration
}

// Name implements Workload.
func (w *IncrementWorkload) Name() string { return "increment" }

func (w *IncrementWorkload) defaults() {
	if w.Workers == 0 {
		w.Workers = 2
	}
	if w.Keys == 0 {
		w.Keys = 3
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = 2 * time.Second
	}
}

func (w *IncrementWorkload) key(i int) string { return "chaos/increment/" + strconv.Itoa(i) }

// Run implements Workload.
func (w *IncrementWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	var wg sync.WaitGroup
	for ci, c := range w.Clients {
		for wi := range w.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := ci*w.Workers + wi; ctx.Err() == nil; k++ {
					key := w.key(k % w.Keys)
					octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
					_, err := c.Counter(octx, key, 1)
					cancel()
					o := outcome(err)
					stats.Op(o)
					rec.Append(IncrementStream, Increment{Key: key, Outcome: o})
					if err != nil {
						sleepCtx(ctx, 20*time.Millisecond)
					}
				}
			}()
		}
	}
	wg.Wait()
}

// Final implements Workload: reads every counter.
func (w *IncrementWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	if len(w.Clients) == 0 {
		return
	}
	for i := range w.Keys {
		key := w.key(i)
		var v int64
		err := retry(ctx, func(ctx context.Context) error {
			kv, err := w.Clients[0].Get(ctx, key)
			if errors.Is(err, client.ErrNotFound) {
				v = 0
				return nil
			}
			if err != nil {
				return err
			}
			v, err = strconv.ParseInt(string(kv.Value), 10, 64)
			return err
		})
		f := IncrementFinal{Key: key, Value: v}
		if err != nil {
			f.Err = err.Error()
		}
		rec.Append(IncrementFinalStream, f)
	}
}

// ExactlyOnce checks IncrementWorkload: each counter ends at least at its
// acknowledged increments (none lost) and at most at those plus the ones
// whose outcome is unknown (none applied twice).
type ExactlyOnce struct{}

// Name implements Checker.
func (ExactlyOnce) Name() string { return "exactly-once" }

// Check implements Checker.
func (c ExactlyOnce) Check(ctx context.Context, r *Run) []Anomaly {
	acked, unknown := map[string]int64{}, map[string]int64{}
	for _, ev := range r.History.Stream(IncrementStream) {
		inc := ev.(Increment)
		switch inc.Outcome {
		case "ok":
			acked[inc.Key]++
		case "unknown":
			unknown[inc.Key]++
		}
	}
	var out []Anomaly
	var n int64
	for _, ev := range r.History.Stream(IncrementFinalStream) {
		f := ev.(IncrementFinal)
		if f.Err != "" {
			out = append(out, Anomaly{Checker: c.Name(), Msg: fmt.Sprintf("counter %s could not be read after the run: %s", f.Key, f.Err)})
			continue
		}
		a, u := acked[f.Key], unknown[f.Key]
		n += a
		switch {
		case f.Value < a:
			out = append(out, Anomaly{Checker: c.Name(), Msg: fmt.Sprintf("counter %s = %d, but %d increments were acknowledged: an acknowledged increment was lost", f.Key, f.Value, a)})
		case f.Value > a+u:
			out = append(out, Anomaly{Checker: c.Name(), Msg: fmt.Sprintf("counter %s = %d, but only %d increments were acknowledged and %d had an unknown outcome: an increment applied twice", f.Key, f.Value, a, u)})
		}
	}
	var u int64
	for _, v := range unknown {
		u += v
	}
	r.Stats.Check("increments acknowledged (exactly once)", int(n))
	r.Stats.Check("increments whose deadline passed first (outcome unknown)", int(u))
	return out
}
