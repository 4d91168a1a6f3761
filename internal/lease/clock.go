package lease

import (
	"sync"
	"time"
)

// Clock is the Lessor's time source. Only durations between its readings
// matter, so the system clock's monotonic reading is what counts.
type Clock interface {
	Now() time.Time
}

// SystemClock is time.Now.
type SystemClock struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (SystemClock) Now() time.Time { return time.Now() }

// FakeClock is a Clock tests move by hand.
type FakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewFakeClock returns a FakeClock at an arbitrary fixed time.
func NewFakeClock() *FakeClock { return &FakeClock{t: time.Unix(1_000_000, 0)} }

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// slowClock is a clock slowed by 1+maxDrift from the moment it was made.
// If the clock it wraps runs at any rate within [1-maxDrift, 1+maxDrift]
// of real time, every duration between two of its readings is at most
// the real duration, and at least (1-maxDrift)/(1+maxDrift) of it.
type slowClock struct {
	c     Clock
	start time.Time // c's reading at creation; Add keeps its monotonic part
	slow  float64   // 1 + maxDrift
}

// boundDrift returns c, slowed so that it never measures more time than
// really passed as long as c's rate is within ±maxDrift (maxDrift <= 0:
// c itself, rates assumed exact).
func boundDrift(c Clock, maxDrift float64) Clock {
	if maxDrift <= 0 {
		return c
	}
	return &slowClock{c: c, start: c.Now(), slow: 1 + maxDrift}
}

// Now returns start plus the elapsed time of c divided by 1+maxDrift.
// Dividing is monotone, so readings never go backwards if c's do not.
func (s *slowClock) Now() time.Time {
	return s.start.Add(time.Duration(float64(s.c.Now().Sub(s.start)) / s.slow))
}
