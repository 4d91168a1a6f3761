package lease

import (
	"testing"
	"time"
)

func TestLessorExpiryOnlyWhenPrimary(t *testing.T) {
	clk := NewFakeClock()
	l := NewLessor(clk, 0, time.Second)
	l.Apply([]Change{{Kind: Granted, ID: 1, TTLMs: 3000, RemainingMs: 3000, Epoch: 1}})
	clk.Advance(5 * time.Second)
	if got := l.Expired(10); len(got) != 0 {
		t.Fatalf("a follower proposed expiries %v", got)
	}
	l.Promote()
	// Promotion counts from when the grant was applied here, not from now.
	if got := l.Expired(10); len(got) != 1 || got[0] != (Expiry{ID: 1, Epoch: 1}) {
		t.Fatalf("expired = %v, want lease 1 epoch 1", got)
	}
	if got := l.Expired(10); len(got) != 0 {
		t.Fatalf("an expiry in flight was proposed twice: %v", got)
	}
	l.ExpireFailed(1)
	if got := l.Expired(10); len(got) != 1 {
		t.Fatalf("a failed expiry was not retried: %v", got)
	}
}

func TestLessorRenewalPostponesExpiry(t *testing.T) {
	clk := NewFakeClock()
	l := NewLessor(clk, 0, time.Hour)
	l.Promote()
	l.Apply([]Change{{Kind: Granted, ID: 7, TTLMs: 2000, RemainingMs: 2000, Epoch: 1}})
	for i := 0; i < 10; i++ {
		clk.Advance(1900 * time.Millisecond)
		if got := l.Expired(10); len(got) != 0 {
			t.Fatalf("round %d: renewed lease expired", i)
		}
		l.Apply([]Change{{Kind: Renewed, ID: 7, TTLMs: 2000, RemainingMs: 2000, Epoch: uint64(i + 2)}})
	}
	clk.Advance(1999 * time.Millisecond)
	if got := l.Expired(10); len(got) != 0 {
		t.Fatal("expired before its TTL since the last renewal")
	}
	clk.Advance(time.Millisecond)
	if got := l.Expired(10); len(got) != 1 || got[0].Epoch != 11 {
		t.Fatalf("expired = %v, want lease 7 at epoch 11", got)
	}
}

// TestLessorNewLeader: a follower promoted after the old leader died
// resumes from the last durable record, neither early nor reset.
func TestLessorNewLeader(t *testing.T) {
	clk := NewFakeClock()
	follower := NewLessor(clk, 0, time.Second)
	follower.Apply([]Change{{Kind: Granted, ID: 3, TTLMs: 10_000, RemainingMs: 10_000, Epoch: 1}})
	clk.Advance(4 * time.Second)
	// The old leader checkpointed 6s remaining; this member applies it now.
	follower.Apply([]Change{{Kind: Checkpointed, ID: 3, TTLMs: 10_000, RemainingMs: 6000, Epoch: 1}})
	clk.Advance(2 * time.Second) // the leader dies; an election follows
	follower.Promote()
	if _, rem, _ := follower.Remaining(3); rem != 4*time.Second {
		t.Fatalf("remaining after promotion = %v, want 4s (6s checkpointed 2s ago), not a reset to 10s", rem)
	}
	clk.Advance(4*time.Second - time.Millisecond)
	if got := follower.Expired(10); len(got) != 0 {
		t.Fatal("expired early")
	}
	clk.Advance(time.Millisecond)
	if got := follower.Expired(10); len(got) != 1 {
		t.Fatal("not expired at its deadline")
	}
}

func TestLessorCheckpoints(t *testing.T) {
	clk := NewFakeClock()
	l := NewLessor(clk, 0, time.Second)
	l.Promote()
	l.Apply([]Change{
		{Kind: Granted, ID: 1, TTLMs: 10_000, RemainingMs: 10_000, Epoch: 1},
		{Kind: Granted, ID: 2, TTLMs: 10_000, RemainingMs: 10_000, Epoch: 1},
	})
	clk.Advance(999 * time.Millisecond)
	if got := l.Checkpoints(10); len(got) != 0 {
		t.Fatalf("checkpoint before the interval: %v", got)
	}
	clk.Advance(time.Millisecond)
	l.Apply([]Change{{Kind: Renewed, ID: 2, TTLMs: 10_000, RemainingMs: 10_000, Epoch: 2}})
	got := l.Checkpoints(10)
	if len(got) != 1 || got[0] != (Checkpoint{ID: 1, Epoch: 1, RemainingMs: 9000}) {
		t.Fatalf("checkpoints = %v, want lease 1 with 9000ms (2 was just renewed)", got)
	}
	if again := l.Checkpoints(10); len(again) != 0 {
		t.Fatalf("checkpoint in flight proposed twice: %v", again)
	}
	l.Apply([]Change{{Kind: Checkpointed, ID: 1, TTLMs: 10_000, RemainingMs: 9000, Epoch: 1}})
	clk.Advance(time.Second)
	if got := l.Checkpoints(10); len(got) != 2 {
		t.Fatalf("second round = %v, want both", got)
	}
}

func TestLessorResetCountsFromLoad(t *testing.T) {
	clk := NewFakeClock()
	l := NewLessor(clk, 0, time.Second)
	l.Reset([]Record{{ID: 4, TTLMs: 5000, RemainingMs: 1500, Epoch: 3}})
	clk.Advance(time.Second)
	l.Promote()
	if _, rem, ok := l.Remaining(4); !ok || rem != 500*time.Millisecond {
		t.Fatalf("remaining = %v, want 500ms", rem)
	}
	l.Apply([]Change{{Kind: Revoked, ID: 4}})
	if _, _, ok := l.Remaining(4); ok || l.Len() != 0 {
		t.Fatal("revoked lease still in the table")
	}
}
