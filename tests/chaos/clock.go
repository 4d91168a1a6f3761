package chaos

import (
	"sync"
	"time"
)

// SkewClock is a per-node clock whose rate a nemesis can change: each
// in-process node measures lease deadlines with its own
// (server.Config.LeaseClock), and the "clock-drift" fault makes one run
// fast or slow. Only its rate matters: the lessor compares readings of
// one clock, never clocks of two members, so an offset would change
// nothing.
//
// Readings keep time.Now's monotonic part, and changing the rate
// re-anchors the clock where it stands, so it never goes backwards.
type SkewClock struct {
	mu     sync.Mutex
	real   time.Time // time.Now() when the rate last changed
	anchor time.Time // the clock's reading then
	rate   float64
}

// NewSkewClock returns a clock running at real time's rate.
func NewSkewClock() *SkewClock {
	now := time.Now()
	return &SkewClock{real: now, anchor: now, rate: 1}
}

// Now is the anchor plus the real time elapsed since, times the rate.
func (c *SkewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked(time.Now())
}

func (c *SkewClock) nowLocked(real time.Time) time.Time {
	return c.anchor.Add(time.Duration(float64(real.Sub(c.real)) * c.rate))
}

// SetRate makes the clock run rate times as fast as real time from now
// on (1: real time; 1.05: 5% fast).
func (c *SkewClock) SetRate(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	real := time.Now()
	c.anchor, c.real, c.rate = c.nowLocked(real), real, rate
}
