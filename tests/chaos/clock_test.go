package chaos

import (
	"testing"
	"time"
)

// TestSkewClock: a SkewClock runs at its rate, and changing the rate
// never moves it backwards.
func TestSkewClock(t *testing.T) {
	c := NewSkewClock()
	for _, rate := range []float64{2, 0.5, 1.05, 1} {
		before := c.Now()
		c.SetRate(rate)
		if after := c.Now(); after.Before(before) {
			t.Fatalf("SetRate(%v) moved the clock back by %v", rate, before.Sub(after))
		}
		// Each reading is bracketed by real-time readings, so the
		// clock's elapsed time is bounded by rate times theirs (give or
		// take a microsecond of rounding).
		r0 := time.Now()
		c0 := c.Now()
		r0b := time.Now()
		for time.Since(r0) < 2*time.Millisecond {
		}
		r1a := time.Now()
		c1 := c.Now()
		r1 := time.Now()
		lo := time.Duration(float64(r1a.Sub(r0b))*rate) - time.Microsecond
		hi := time.Duration(float64(r1.Sub(r0))*rate) + time.Microsecond
		if got := c1.Sub(c0); got < lo || got > hi {
			t.Errorf("rate %v: clock measured %v, want within [%v, %v]", rate, got, lo, hi)
		}
	}
}
