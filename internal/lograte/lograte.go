// Package lograte keeps an event that repeats (refused peer traffic,
// Pebble's background errors, a full connection table) from flooding the
// log: one line per kind per interval, with a count of those not written
// in between. Storage, the peer transport and the server's listeners
// share it.
package lograte

import (
	"sync"
	"time"
)

// maxKinds bounds the table; past it the table starts over.
const maxKinds = 256

// Limiter lets one event per kind through per interval.
type Limiter struct {
	every time.Duration

	mu    sync.Mutex
	now   func() time.Time
	kinds map[string]*entry
}

type entry struct {
	last       time.Time
	suppressed int
}

// New returns a Limiter that lets one event of each kind through every
// interval.
func New(every time.Duration) *Limiter {
	return &Limiter{every: every, now: time.Now, kinds: map[string]*entry{}}
}

// SetClock replaces the clock (tests).
func (l *Limiter) SetClock(now func() time.Time) {
	l.mu.Lock()
	l.now = now
	l.mu.Unlock()
}

// Allow reports whether an event of kind may be logged now, and how many
// were held back since the last one that was.
func (l *Limiter) Allow(kind string) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.kinds[kind]
	if e == nil {
		if len(l.kinds) >= maxKinds {
			l.kinds = map[string]*entry{}
		}
		l.kinds[kind] = &entry{last: now}
		return 0, true
	}
	if now.Sub(e.last) < l.every {
		e.suppressed++
		return 0, false
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return n, true
}
