package chaos

import (
	"sync"
	"time"
)

// SkewClock is a per-node clock whose offset from real time a nemesis can
// change: the hook for lease-safety tests ("leases must stay safe under
// clock skew").
//
// TODO(leases): server.Config has no clock yet. When the lease engineer
// adds one (e.g. `Clock interface{ Now() time.Time }` used by the leader's
// expiry loop), give each in-process node its own SkewClock in the
// harness, add a "clock-skew" fault kind to the in-process nemesis
// (Skew(±d) on Inject, Skew(0) on heal) and a lease-safety Checker here.
// Nothing in the KV suite depends on time, so it is unused for now.
type SkewClock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is real time plus the current skew.
func (c *SkewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Skew sets the offset from real time.
func (c *SkewClock) Skew(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset = d
}
