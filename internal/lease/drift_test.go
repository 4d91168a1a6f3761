package lease

import (
	"fmt"
	"testing"
	"time"
)

// rateClock is a member's clock running at rate times real time; real
// time is what the test advances. Several rateClocks advanced together
// are members whose clocks drift apart.
type rateClock struct {
	base time.Time
	real time.Duration
	rate float64
}

func newRateClock(rate float64) *rateClock {
	return &rateClock{base: time.Unix(1_000_000, 0), rate: rate}
}

func (c *rateClock) Now() time.Time {
	return c.base.Add(time.Duration(float64(c.real) * c.rate))
}

// expiresAt advances real time in steps of step until l (primary) wants
// to expire lease id, and returns the real time at which it did. It also
// returns the latest real instant Remaining promised the lease would
// still be alive at, which must not be after the expiry.
func expiresAt(t *testing.T, l *Lessor, id int64, step, limit time.Duration, clocks ...*rateClock) (expiry, promised time.Duration) {
	t.Helper()
	for {
		now := clocks[0].real
		if _, rem, ok := l.Remaining(id); ok && now+rem > promised {
			promised = now + rem
		}
		if got := l.Expired(10); len(got) > 0 {
			return now, promised
		}
		if now > limit {
			t.Fatalf("lease %d not expired after %v of real time", id, now)
		}
		for _, c := range clocks {
			c.real += step
		}
	}
}

// TestLessorSafeUnderBoundedDrift: with clocks running up to drift fast
// or slow, a lease expires no sooner than TTL of real time after its
// grant was applied, and no later than TTL*(1+drift)/(1-drift); the time
// Remaining reports is never more than what is really left.
func TestLessorSafeUnderBoundedDrift(t *testing.T) {
	const ttl = 10 * time.Second
	const step = time.Millisecond
	for _, drift := range []float64{0.01, 0.05, 0.2} {
		for _, rate := range []float64{1 - drift, 1, 1 + drift} {
			t.Run(fmt.Sprintf("drift=%v/rate=%v", drift, rate), func(t *testing.T) {
				clk := newRateClock(rate)
				l := NewLessor(clk, drift, time.Hour)
				l.Promote()
				l.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: ttl.Milliseconds(), Epoch: 1}})
				latest := time.Duration(float64(ttl) * (1 + drift) / (1 - drift))
				got, promised := expiresAt(t, l, 1, step, 2*latest, clk)
				if got < ttl {
					t.Errorf("expired after %v of real time, before its TTL of %v", got, ttl)
				}
				if got > latest+step {
					t.Errorf("expired after %v of real time, later than TTL*(1+d)/(1-d) = %v", got, latest)
				}
				if promised > got {
					t.Errorf("Remaining promised the lease until %v, but it expired at %v", promised, got)
				}
			})
		}
	}
}

// TestLessorDriftAcrossLeaderChange: a checkpoint recorded by one leader
// and resumed by the next, each with its own clock drifting either way
// within the bound, still never shortens the lease in real time.
func TestLessorDriftAcrossLeaderChange(t *testing.T) {
	const ttl = 10 * time.Second
	const step = time.Millisecond
	drift := 0.05
	for _, rates := range [][2]float64{{1 + drift, 1 + drift}, {1 + drift, 1 - drift}, {1 - drift, 1 + drift}, {1 - drift, 1 - drift}} {
		t.Run(fmt.Sprintf("leader=%v/next=%v", rates[0], rates[1]), func(t *testing.T) {
			lc, fc := newRateClock(rates[0]), newRateClock(rates[1])
			leader, next := NewLessor(lc, drift, time.Second), NewLessor(fc, drift, time.Second)
			leader.Promote()
			grant := []Change{{Kind: Granted, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: ttl.Milliseconds(), Epoch: 1}}
			leader.Apply(grant)
			next.Apply(grant)
			lc.real, fc.real = 4*time.Second, 4*time.Second
			cps := leader.Checkpoints(10)
			if len(cps) != 1 {
				t.Fatalf("checkpoints = %v, want lease 1", cps)
			}
			next.Apply([]Change{{Kind: Checkpointed, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: cps[0].RemainingMs, Epoch: 1}})
			fc.real += time.Second // the leader dies; an election follows
			next.Promote()
			latest := time.Duration(float64(ttl) * (1 + drift) / (1 - drift))
			got, _ := expiresAt(t, next, 1, step, 2*latest, fc)
			if got < ttl {
				t.Errorf("expired after %v of real time, before its TTL of %v", got, ttl)
			}
			// The checkpoint rounds up to a millisecond of slowed time.
			if got > latest+3*step {
				t.Errorf("expired after %v of real time, later than TTL*(1+d)/(1-d) = %v", got, latest)
			}
		})
	}
}

// TestLessorWithoutDriftBoundExpiresEarly is why the bound exists: a
// leader whose clock runs 5% fast, with no drift allowed for, expires a
// lease before its TTL has really passed.
func TestLessorWithoutDriftBoundExpiresEarly(t *testing.T) {
	const ttl = 10 * time.Second
	clk := newRateClock(1.05)
	l := NewLessor(clk, 0, time.Hour)
	l.Promote()
	l.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: ttl.Milliseconds(), Epoch: 1}})
	if got, _ := expiresAt(t, l, 1, time.Millisecond, 2*ttl, clk); got >= ttl-400*time.Millisecond {
		t.Fatalf("expired after %v of real time; a 5%% fast clock should cut %v to about %v", got, ttl, ttl*100/105)
	}
}
