package lease

import (
	"slices"
	"testing"
	"time"
)

// primaryWithRenewal is a caught-up primary with a renew window of w and
// lease 1 (TTL ttl), whose renewal it proposed at the current time and
// has applied.
func primaryWithRenewal(t *testing.T, clk *FakeClock, w, ttl time.Duration) *Lessor {
	t.Helper()
	l := NewLessor(clk, 0, time.Hour)
	l.SetRenewWindow(w)
	l.CaughtUp(l.Promote())
	l.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: ttl.Milliseconds(), Epoch: 1}})
	p := l.Now()
	l.Apply([]Change{{Kind: Renewed, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: ttl.Milliseconds(), Epoch: 2}})
	l.RenewApplied([]int64{1}, []int64{ttl.Milliseconds()}, p)
	return l
}

func TestRenewLocalOnlyWithinTheWindow(t *testing.T) {
	clk := NewFakeClock()
	l := primaryWithRenewal(t, clk, time.Second, 10*time.Second)

	clk.Advance(400 * time.Millisecond)
	ttls, refresh, ok := l.RenewLocal([]int64{1})
	if !ok || !slices.Equal(ttls, []int64{10_000}) || len(refresh) != 0 {
		t.Fatalf("within the first half of the window: ttls %v refresh %v ok %v, want [10000] none true", ttls, refresh, ok)
	}
	clk.Advance(200 * time.Millisecond)
	if _, refresh, ok := l.RenewLocal([]int64{1}); !ok || !slices.Equal(refresh, []int64{1}) {
		t.Fatalf("past half the window: refresh %v ok %v, want the lease recorded again", refresh, ok)
	}
	if _, _, ok := l.RenewLocal([]int64{1, 2}); ok {
		t.Fatal("a keep-alive naming an unknown lease was answered from memory")
	}
	lastAck := clk.Now()
	clk.Advance(400*time.Millisecond + time.Nanosecond)
	if _, _, ok := l.RenewLocal([]int64{1}); ok {
		t.Fatal("answered from memory past the window since the last recorded renewal")
	}
	// The keep-alive answered at 600ms counts: the lease lives until 10.6s.
	clk.Advance(lastAck.Add(10*time.Second - time.Millisecond).Sub(clk.Now()))
	if got := l.Expired(10); len(got) != 0 {
		t.Fatalf("expired %v before TTL after a keep-alive answered from memory", got)
	}
	clk.Advance(time.Millisecond)
	if got := l.Expired(10); len(got) != 1 {
		t.Fatal("not expired TTL after the last keep-alive")
	}
	// An expiry is in flight: memory must not answer, the expiry would
	// win at apply.
	if _, _, ok := l.RenewLocal([]int64{1}); ok {
		t.Fatal("answered from memory with an expiry in flight")
	}
}

func TestRenewLocalNeedsPrimaryAndOwnRenewal(t *testing.T) {
	clk := NewFakeClock()
	l := NewLessor(clk, 0, time.Hour)
	l.SetRenewWindow(time.Second)
	l.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: 5000, RemainingMs: 5000, Epoch: 1}})
	l.RenewApplied([]int64{1}, []int64{5000}, l.Now())
	if _, _, ok := l.RenewLocal([]int64{1}); ok {
		t.Fatal("a follower answered from memory")
	}
	l.Promote()
	if _, _, ok := l.RenewLocal([]int64{1}); !ok {
		t.Fatal("the primary did not answer from memory right after its renewal applied")
	}
	// A renewal applied here that another member proposed is no anchor.
	m := NewLessor(clk, 0, time.Hour)
	m.SetRenewWindow(time.Second)
	m.Promote()
	m.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: 5000, RemainingMs: 5000, Epoch: 1}, {Kind: Renewed, ID: 1, TTLMs: 5000, RemainingMs: 5000, Epoch: 2}})
	if _, _, ok := m.RenewLocal([]int64{1}); ok {
		t.Fatal("answered from memory with no renewal of its own")
	}
	// A renewal that found no lease (ttl 0) is no anchor either.
	m.RenewApplied([]int64{1}, []int64{0}, m.Now())
	if _, _, ok := m.RenewLocal([]int64{1}); ok {
		t.Fatal("answered from memory on a renewal that found no lease")
	}
	// Off (window 0): never.
	off := primaryWithRenewal(t, clk, 0, 5*time.Second)
	if _, _, ok := off.RenewLocal([]int64{1}); ok {
		t.Fatal("answered from memory with the window off")
	}
}

// TestNewLeaderCoversMemoryRenewals is the argument of SetRenewWindow
// played out: the old leader answers keep-alives from memory up to the
// end of its window and dies; the next leader, whether it applied the
// renewal before or after its promotion, does not expire the lease before
// TTL after the last of them.
func TestNewLeaderCoversMemoryRenewals(t *testing.T) {
	const ttl = 10 * time.Second
	const w = time.Second
	for _, late := range []bool{false, true} {
		clk := NewFakeClock()
		granted := Change{Kind: Granted, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: ttl.Milliseconds(), Epoch: 1}
		renewed := Change{Kind: Renewed, ID: 1, TTLMs: ttl.Milliseconds(), RemainingMs: ttl.Milliseconds(), Epoch: 2}
		old, next := NewLessor(clk, 0, time.Hour), NewLessor(clk, 0, time.Hour)
		for _, l := range []*Lessor{old, next} {
			l.SetRenewWindow(w)
			l.Apply([]Change{granted})
		}
		old.CaughtUp(old.Promote())
		// Five seconds later the old leader renews the lease through raft.
		clk.Advance(5 * time.Second)
		p := old.Now()
		old.Apply([]Change{renewed})
		old.RenewApplied([]int64{1}, []int64{ttl.Milliseconds()}, p)
		if !late {
			next.Apply([]Change{renewed}) // applied as it was proposed
		}
		// The old leader is cut off; next is elected while the old one,
		// not knowing yet, answers keep-alives from memory to the end of
		// its window.
		clk.Advance(200 * time.Millisecond)
		gen := next.Promote()
		bound := p.Add(ttl + w) // the record, plus TTL and the window
		if late {
			// Elected before applying the old leader's renewal, which
			// arrives while next catches up, and counts from then.
			clk.Advance(100 * time.Millisecond)
			next.Apply([]Change{renewed})
			bound = clk.Now().Add(ttl + w)
		}
		clk.Advance(p.Add(w).Sub(clk.Now()))
		if _, _, ok := old.RenewLocal([]int64{1}); !ok {
			t.Fatal("the old leader did not answer at the end of its window")
		}
		lastAck := clk.Now() // promises the lease until lastAck + ttl
		next.CaughtUp(gen)
		for clk.Now().Before(lastAck.Add(ttl)) {
			if got := next.Expired(10); len(got) != 0 {
				t.Fatalf("late=%v: the new leader expired the lease %v after the last keep-alive the old one answered, before TTL %v", late, clk.Now().Sub(lastAck), ttl)
			}
			clk.Advance(50 * time.Millisecond)
		}
		// Bounded: no later than where the record was applied, plus TTL
		// and the window.
		clk.Advance(bound.Sub(clk.Now()))
		if got := next.Expired(10); len(got) != 1 {
			t.Fatalf("late=%v: not expired %v after the last keep-alive", late, clk.Now().Sub(lastAck))
		}
	}
}

// TestRenewWindowDoesNotCompound: a checkpoint records the deadline of
// the records, not the window added on top, so a lease nobody keeps alive
// gains at most one window however many leaders checkpoint it.
func TestRenewWindowDoesNotCompound(t *testing.T) {
	clk := NewFakeClock()
	l := NewLessor(clk, 0, time.Second)
	l.SetRenewWindow(time.Second)
	l.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: 10_000, RemainingMs: 10_000, Epoch: 1}})
	l.CaughtUp(l.Promote())
	clk.Advance(2 * time.Second)
	cps := l.Checkpoints(10)
	if len(cps) != 1 || cps[0].RemainingMs != 8000 {
		t.Fatalf("checkpoint = %v, want 8000ms remaining (the window not recorded)", cps)
	}
	if _, rem, _ := l.Remaining(1); rem != 9*time.Second {
		t.Fatalf("remaining on a new leader = %v, want 9s: 8s of record and the 1s window", rem)
	}
}

// TestRenewWindowCheckedOnTheFastClock: with a drift bound d the window
// is checked on a clock that may run (1+d)/(1-d) fast, so it never spans
// more real time than the window added by the next leader.
func TestRenewWindowCheckedOnTheFastClock(t *testing.T) {
	clk := NewFakeClock()
	l := NewLessor(clk, 0.1, time.Hour)
	l.SetRenewWindow(time.Second)
	l.CaughtUp(l.Promote())
	l.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: 10_000, RemainingMs: 10_000, Epoch: 1}})
	l.RenewApplied([]int64{1}, []int64{10_000}, l.Now())
	// The slowed clock shows 1/1.1 of this; the window is checked against
	// 1s * 0.9/1.1 of slowed time: 900ms of this clock.
	clk.Advance(900 * time.Millisecond)
	if _, _, ok := l.RenewLocal([]int64{1}); !ok {
		t.Fatal("not answered at 900ms of a 1s window under a 10% drift bound")
	}
	clk.Advance(time.Millisecond)
	if _, _, ok := l.RenewLocal([]int64{1}); ok {
		t.Fatal("answered past 900ms: a clock 10% fast would have spanned more than the window in real time")
	}
}
