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
	deadline time.Time
	// cover is how long the lease may have been promised beyond its
	// records: keep-alives this member acknowledged from memory, and, on
	// a new leader, those a previous leader may have (RenewWindow). The
	// primary expires the lease at the later of deadline and cover;
	// checkpoints record deadline only, so cover never compounds.
	cover time.Time
	// renewedAt is when this member proposed the latest renewal of the
	// lease that it has since applied (zero: none): the anchor of
	// acknowledging keep-alives from memory (RenewLocal).
	renewedAt     time.Time
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
	maxDrift        float64
	checkpointEvery time.Duration
	leases          map[int64]*entry
	primary         bool
	// window and localWithin: see SetRenewWindow. caughtUp says the
	// primary has applied everything committed before its term began, so
	// no record a previous leader's memory acknowledgments rest on is
	// still to come; gen counts promotions, for CaughtUp.
	window, localWithin time.Duration
	caughtUp            bool
	gen                 uint64
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
	return &Lessor{clock: boundDrift(clock, maxDrift), maxDrift: max(maxDrift, 0), checkpointEvery: checkpointEvery, leases: map[int64]*entry{}, added: make(chan struct{}, 1)}
}

// SetRenewWindow lets the primary acknowledge a keep-alive from memory,
// without a raft round, when this member's own renewal of that lease was
// proposed at most w ago and has been applied (RenewLocal); 0 turns it
// off. Call it before the Lessor is used.
//
// Why no acknowledgment is lost: a keep-alive acknowledged from memory at
// time a promises the lease until a + TTL, and a <= p + w, where p is when
// a renewal that committed was proposed. Every later leader applied that
// renewal (or a later record of the lease) after p, and counts from what
// it applied plus w (Promote, and Apply until CaughtUp): t + TTL + w >=
// p + w + TTL >= a + TTL. The cost is that a leader change may let a lease
// live up to w longer. The window is checked on the clock shortened by
// (1-d)/(1+d), so that it spans at most w of real time on a clock within
// the drift bound, while w is added on the slowed clock, so it lasts at
// least w of real time.
func (l *Lessor) SetRenewWindow(w time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.window = max(w, 0)
	l.localWithin = time.Duration(float64(l.window) * (1 - l.maxDrift) / (1 + l.maxDrift))
}

// Now reads the Lessor's clock: the time to pass to RenewApplied for a
// renewal about to be proposed.
func (l *Lessor) Now() time.Time { return l.clock.Now() }

// RenewApplied records that this member proposed, at p (from Now, read
// before proposing), a renewal of ids that has now been applied; ttls[i]
// is what apply answered for ids[i] (0: not found). A lease renewed
// there may then be renewed from memory until p + the window.
func (l *Lessor) RenewApplied(ids []int64, ttls []int64, p time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, id := range ids {
		if e := l.leases[id]; e != nil && i < len(ttls) && ttls[i] > 0 && p.After(e.renewedAt) {
			e.renewedAt = p
		}
	}
}

// RenewLocal acknowledges a keep-alive of every lease in ids from memory,
// if it may (see SetRenewWindow): this member is the primary, and each
// lease has a renewal this member proposed within the window, applied,
// and no expiry in flight. It then returns each lease's TTL in ms, and
// the leases whose renewal should be recorded again through raft (their
// anchor is past half the window), and true. Otherwise it changes
// nothing and returns false: the caller renews through raft.
func (l *Lessor) RenewLocal(ids []int64) (ttls []int64, refresh []int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.primary || l.localWithin <= 0 {
		return nil, nil, false
	}
	now := l.clock.Now()
	for _, id := range ids {
		e := l.leases[id]
		if e == nil || e.expiring || e.renewedAt.IsZero() || now.Sub(e.renewedAt) > l.localWithin {
			return nil, nil, false
		}
	}
	ttls = make([]int64, len(ids))
	for i, id := range ids {
		e := l.leases[id]
		if d := now.Add(e.ttl); d.After(e.cover) {
			e.cover = d
		}
		ttls[i] = e.ttl.Milliseconds()
		if now.Sub(e.renewedAt) > l.localWithin/2 {
			refresh = append(refresh, id)
		}
	}
	return ttls, refresh, true
}

// expiresAt is when the primary expires e: the later of its recorded
// deadline and what was promised from memory.
func (e *entry) expiresAt() time.Time {
	if e.cover.After(e.deadline) {
		return e.cover
	}
	return e.deadline
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
		if l.primary {
			e.cover = e.deadline.Add(l.window)
		}
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
			l.coverPrevious(e, now)
		case Checkpointed:
			e := l.leases[c.ID]
			if e == nil {
				continue
			}
			// The leader's own deadline stays: it is at least as late as
			// what the checkpoint recorded.
			e.remaining, e.durableAt, e.checkpointing = ms(c.RemainingMs), now, false
			l.coverPrevious(e, now)
		case Revoked:
			delete(l.leases, c.ID)
		}
	}
}

// coverPrevious extends e's cover by the window past a record applied on
// a primary that has not caught up: the record may come from a previous
// leader, which may have acknowledged keep-alives from memory on it.
func (l *Lessor) coverPrevious(e *entry, now time.Time) {
	if !l.primary || l.caughtUp || l.window <= 0 {
		return
	}
	if d := now.Add(e.remaining + l.window); d.After(e.cover) {
		e.cover = d
	}
}

// Promote makes the Lessor primary: each lease's countdown resumes from
// what this member knows durably, durableAt + remaining. That is never
// earlier than the deadline the previous leader had when it recorded it
// (this member applied the record after it was proposed), and never later
// than that deadline by more than this member's apply lag. With a renew
// window, each lease is also covered until durableAt + remaining + window
// (see SetRenewWindow), and so is every record applied until CaughtUp.
// Promote returns the promotion's generation, for CaughtUp.
func (l *Lessor) Promote() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.primary {
		return l.gen
	}
	l.primary, l.caughtUp = true, false
	l.gen++
	for _, e := range l.leases {
		e.deadline = e.durableAt.Add(e.remaining)
		if l.window > 0 {
			if d := e.deadline.Add(l.window); d.After(e.cover) {
				e.cover = d
			}
		}
		e.expiring, e.checkpointing = false, false
	}
	return l.gen
}

// CaughtUp tells the primary of generation gen that it has applied every
// entry committed before its term began: records applied from now on
// were proposed in its term, by members that acknowledge nothing from
// memory on them except itself.
func (l *Lessor) CaughtUp(gen uint64) {
	l.mu.Lock()
	if l.primary && l.gen == gen {
		l.caughtUp = true
	}
	l.mu.Unlock()
}

// Demote stops deadline tracking (leadership was lost).
func (l *Lessor) Demote() {
	l.mu.Lock()
	l.primary, l.caughtUp = false, false
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
		remaining = e.expiresAt().Sub(now)
	} else {
		remaining = e.durableAt.Add(e.remaining).Sub(now)
	}
	// The window's cover may reach past a full TTL; report no more than
	// the TTL, the short side.
	return e.ttl, min(max(remaining, 0), e.ttl), true
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
		if d := e.expiresAt(); !e.expiring && !d.After(now) {
			cs = append(cs, cand{id, d})
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
