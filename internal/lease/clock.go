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
