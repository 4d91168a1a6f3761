package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// RateLimitStream is the Recorder stream of RateLimitWorkload.
const RateLimitStream = "ratelimit"

// RateAllowed is one decision that allowed N tokens, at the cluster's
// decision time At (unix ns).
type RateAllowed struct {
	Client int
	N      int64
	At     int64
}

// RateLimitWorkload has several clients ask one bucket for tokens far
// faster than it refills, and records every allowed decision.
type RateLimitWorkload struct {
	Clients   []*client.Client
	Key       string
	Rate      client.RateLimit
	OpTimeout time.Duration
}

// Name implements Workload.
func (w *RateLimitWorkload) Name() string { return "ratelimit" }

func (w *RateLimitWorkload) defaults() {
	if w.Key == "" {
		w.Key = "chaos/ratelimit"
	}
	if w.Rate == (client.RateLimit{}) {
		w.Rate = client.RateLimit{Limit: 20, Period: time.Second, Burst: 5}
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = 2 * time.Second
	}
}

// Run implements Workload: each client asks for 1 or 2 tokens in a tight
// loop; only answered, allowed decisions are recorded (an unknown outcome
// was not used by its client, so it cannot count against the bound).
func (w *RateLimitWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	var wg sync.WaitGroup
	for i, c := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ctx.Err() == nil; k++ {
				n := int64(1 + k%2)
				octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
				d, err := c.RateLimitAllow(octx, w.Key, w.Rate, n)
				cancel()
				stats.Op(outcome(err))
				if err != nil {
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				if d.Allowed {
					rec.Append(RateLimitStream, RateAllowed{Client: i, N: n, At: d.At.UnixNano()})
				}
			}
		}()
	}
	wg.Wait()
}

// Final implements Workload.
func (w *RateLimitWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {}

// RateLimitBound checks RateLimitWorkload's decisions: over any window of
// decision times of length W, the tokens allowed are at most burst +
// W/T (T = period/limit rounded up to a nanosecond).
type RateLimitBound struct{ Rate client.RateLimit }

// Name implements Checker.
func (RateLimitBound) Name() string { return "ratelimit-bound" }

// Check implements Checker.
func (c RateLimitBound) Check(ctx context.Context, r *Run) []Anomaly {
	rate := c.Rate
	if rate == (client.RateLimit{}) {
		rate = (&RateLimitWorkload{}).defaultRate()
	}
	var allowed []RateAllowed
	for _, ev := range r.History.Stream(RateLimitStream) {
		allowed = append(allowed, ev.(RateAllowed))
	}
	r.Stats.Check("rate-limit decisions", len(allowed))
	if msg := RateWindowViolation(allowed, rate); msg != "" {
		return []Anomaly{{Checker: c.Name(), Msg: msg}}
	}
	return nil
}

func (w *RateLimitWorkload) defaultRate() client.RateLimit {
	w.defaults()
	return w.Rate
}

// RateWindowViolation returns "" if, for windows of 1 ms, T, a tenth of
// the period, the period and 10 periods, no window of decision times
// holds more than burst + W/T allowed tokens, or else the first window
// that does.
func RateWindowViolation(allowed []RateAllowed, rate client.RateLimit) string {
	ev := slices.Clone(allowed)
	slices.SortStableFunc(ev, func(a, b RateAllowed) int { return cmp.Compare(a.At, b.At) })
	period := rate.Period.Nanoseconds()
	T := (period + rate.Limit - 1) / rate.Limit
	for _, w := range []int64{int64(time.Millisecond), T, period / 10, period, 10 * period} {
		if w <= 0 {
			continue
		}
		bound := rate.Burst + w/T
		lo, sum := 0, int64(0)
		for hi := range ev {
			sum += ev[hi].N
			for ev[hi].At-ev[lo].At > w {
				sum -= ev[lo].N
				lo++
			}
			if sum > bound {
				return fmt.Sprintf("%d tokens allowed within %v (decisions at %d..%d ns), bound burst %d + %v/T = %d",
					sum, time.Duration(w), ev[lo].At, ev[hi].At, rate.Burst, time.Duration(w), bound)
			}
		}
	}
	return ""
}
