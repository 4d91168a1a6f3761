package lease

import (
	"sort"
	"sync"
	"time"
)

// ChangeKind says what an applied command did to a lease.
type ChangeKind int

const (
	// Granted: a new lease (Grant, or a put with ttl_ms).
	Granted ChangeKind = iota
	// Renewed: a keep-alive reset the lease to its full TTL.
	Renewed
	// Checkpointed: the leader recorded the remaining TTL.
	Checkpointed
	// Revoked: the lease is gone (revoked, expired, or an auto lease that
	// lost its last key).
	Revoked
)

// Change is what one applied command did to one lease; the state machine
// reports them in its effects (state.Effects.Leases), and the server hands
// them to Lessor.Apply at apply time.
type Change struct {
	Kind        ChangeKind
	ID          int64
	TTLMs       int64
	RemainingMs int64
	Epoch       uint64
}

// Checkpoint is a remaining TTL the leader proposes to record.
type Checkpoint struct {
	ID          int64
	Epoch       uint64
	RemainingMs int64
}

// Expiry is a lease the leader proposes to expire.
type Expiry struct {
	ID    int64
	Epoch uint64
}

type entry struct {
	ttl, remaining time.Duration
	epoch          uint64
	// durableAt is the local time at which the command that last wrote
	// remaining was applied here: the lease cannot expire before
	// durableAt + remaining.
	durableAt time.Time
	// deadline is when the lease expires; kept only while primary.
	deadline      time.Time
	expiring      bool // an expiry proposal is in flight
	checkpointing bool // a checkpoint proposal is in flight
}

// Lessor is the in-memory lease table. Every member keeps one, fed with
// the Changes of applied commands; the leader's (the primary) also tracks
// deadlines and decides expiries and checkpoints. It is safe for
// concurrent use.
type Lessor struct {
	mu              sync.Mutex
	clock           Clock
	checkpointEvery time.Duration
	leases          map[int64]*entry
	primary         bool
	// added gets a value (without blocking) whenever a lease is added, so
	// a loop that sleeps while the table is empty knows to look again.
	added chan struct{}
}

// NewLessor returns an empty, non-primary Lessor. A lease is checkpointed
// when its remaining TTL was last recorded checkpointEvery ago or more.
//
// maxDrift is how far (a fraction) the clock's rate may differ from real
// time on any member. The Lessor measures every duration on clock slowed
// by 1+maxDrift, so what it counts as elapsed never exceeds what really
// elapsed, and every "cannot expire before" argument in this package
// holds in real time. The cost: a lease may live up to
// (1+maxDrift)/(1-maxDrift) times its TTL. All durations the Lessor
// reports or records (Remaining, checkpoints) are in that slowed time.
func NewLessor(clock Clock, maxDrift float64, checkpointEvery time.Duration) *Lessor {
	if clock == nil {
		clock = SystemClock{}
	}
	return &Lessor{clock: boundDrift(clock, maxDrift), checkpointEvery: checkpointEvery, leases: map[int64]*entry{}, added: make(chan struct{}, 1)}
}

// Added returns a channel that receives a value after a lease is added to
// the table (Granted, or Reset with leases). A value may be stale: after
// receiving, look at Len again.
func (l *Lessor) Added() <-chan struct{} { return l.added }

func (l *Lessor) notifyAdded() {
	select {
	case l.added <- struct{}{}:
	default:
	}
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// Reset replaces the table with recs, read from the state (at startup or
// after a snapshot was installed). Their remaining TTLs count from now:
// when they were recorded is not known, and later is the safe side.
func (l *Lessor) Reset(recs []Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	l.leases = make(map[int64]*entry, len(recs))
	for _, r := range recs {
		e := &entry{ttl: ms(r.TTLMs), remaining: ms(r.RemainingMs), epoch: r.Epoch, durableAt: now}
		e.deadline = now.Add(e.remaining)
		l.leases[r.ID] = e
	}
	if len(recs) > 0 {
		l.notifyAdded()
	}
}

// Apply updates the table with the changes of one applied command.
func (l *Lessor) Apply(chs []Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	for _, c := range chs {
		switch c.Kind {
		case Granted:
			l.leases[c.ID] = &entry{
				ttl: ms(c.TTLMs), remaining: ms(c.TTLMs), epoch: c.Epoch,
				durableAt: now, deadline: now.Add(ms(c.TTLMs)),
			}
			l.notifyAdded()
		case Renewed:
			e := l.leases[c.ID]
			if e == nil {
				continue
			}
			e.ttl, e.remaining, e.epoch, e.durableAt = ms(c.TTLMs), ms(c.TTLMs), c.Epoch, now
			// Expiries and checkpoints in flight carry the old epoch and
			// will be ignored at apply.
			e.expiring, e.checkpointing = false, false
			if d := now.Add(e.ttl); d.After(e.deadline) {
				e.deadline = d
			}
		case Checkpointed:
			e := l.leases[c.ID]
			if e == nil {
				continue
			}
			// The leader's own deadline stays: it is at least as late as
			// what the checkpoint recorded.
			e.remaining, e.durableAt, e.checkpointing = ms(c.RemainingMs), now, false
		case Revoked:
			delete(l.leases, c.ID)
		}
	}
}

// Promote makes the Lessor primary: each lease's countdown resumes from
// what this member knows durably, durableAt + remaining. That is never
// earlier than the deadline the previous leader had when it recorded it
// (this member applied the record after it was proposed), and never later
// than that deadline by more than this member's apply lag.
func (l *Lessor) Promote() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.primary {
		return
	}
	l.primary = true
	for _, e := range l.leases {
		e.deadline = e.durableAt.Add(e.remaining)
		e.expiring, e.checkpointing = false, false
	}
}

// Demote stops deadline tracking (leadership was lost).
func (l *Lessor) Demote() {
	l.mu.Lock()
	l.primary = false
	l.mu.Unlock()
}

// Remaining returns a lease's granted TTL and remaining time: exact on the
// primary, an estimate from the last durable record elsewhere. Remaining
// is counted on the drift-bounded clock, so it errs short: the primary
// will not expire the lease sooner in real time, but may take up to
// (1+maxDrift)/(1-maxDrift) times longer.
func (l *Lessor) Remaining(id int64) (ttl, remaining time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.leases[id]
	if e == nil {
		return 0, 0, false
	}
	now := l.clock.Now()
	if l.primary {
		remaining = e.deadline.Sub(now)
	} else {
		remaining = e.durableAt.Add(e.remaining).Sub(now)
	}
	return e.ttl, max(remaining, 0), true
}

// Len is the number of leases in the table.
func (l *Lessor) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leases)
}

// Expired returns up to limit leases whose deadline has passed and that
// have no expiry in flight, oldest deadline first, and marks them in
// flight. Only the primary returns any. Call ExpireFailed for those whose
// proposal failed.
func (l *Lessor) Expired(limit int) []Expiry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.primary {
		return nil
	}
	now := l.clock.Now()
	type cand struct {
		id       int64
		deadline time.Time
	}
	var cs []cand
	for id, e := range l.leases {
		if !e.expiring && !e.deadline.After(now) {
			cs = append(cs, cand{id, e.deadline})
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		if !cs[i].deadline.Equal(cs[j].deadline) {
			return cs[i].deadline.Before(cs[j].deadline)
		}
		return cs[i].id < cs[j].id
	})
	if len(cs) > limit {
		cs = cs[:limit]
	}
	out := make([]Expiry, len(cs))
	for i, c := range cs {
		e := l.leases[c.id]
		e.expiring = true
		out[i] = Expiry{ID: c.id, Epoch: e.epoch}
	}
	return out
}

// ExpireFailed clears the in-flight mark of an expiry whose proposal did
// not get an answer, so a later call retries it.
func (l *Lessor) ExpireFailed(id int64) {
	l.mu.Lock()
	if e := l.leases[id]; e != nil {
		e.expiring = false
	}
	l.mu.Unlock()
}

// Checkpoints returns up to limit leases whose remaining TTL was last
// recorded checkpointEvery ago or more, with their remaining TTL now, and
// marks them in flight. Only the primary returns any. Call
// CheckpointFailed if the proposal failed.
func (l *Lessor) Checkpoints(limit int) []Checkpoint {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.primary || l.checkpointEvery <= 0 {
		return nil
	}
	now := l.clock.Now()
	var out []Checkpoint
	for id, e := range l.leases {
		if len(out) >= limit {
			break
		}
		if e.checkpointing || e.expiring || now.Sub(e.durableAt) < l.checkpointEvery {
			continue
		}
		rem := e.deadline.Sub(now)
		if rem <= 0 {
			continue // about to expire; nothing worth recording
		}
		// Round up: a checkpoint must never shorten the lease.
		remMs := int64((rem + time.Millisecond - 1) / time.Millisecond)
		e.checkpointing = true
		out = append(out, Checkpoint{ID: id, Epoch: e.epoch, RemainingMs: remMs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CheckpointFailed clears the in-flight marks of a failed checkpoint.
func (l *Lessor) CheckpointFailed(cps []Checkpoint) {
	l.mu.Lock()
	for _, c := range cps {
		if e := l.leases[c.ID]; e != nil {
			e.checkpointing = false
		}
	}
	l.mu.Unlock()
}
