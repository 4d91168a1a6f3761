package main

import (
	"errors"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
)

// TestLeaderFrozenPastTTL is the scenario's claim: the leader freezes
// (keep-alives and all) past its TTL in period 2; another worker takes
// over, every period's job runs exactly once, and the frozen leader's late
// write is refused by the fence of its term.
func TestLeaderFrozenPastTTL(t *testing.T) {
	ctx, env := proctest.Embedded(t, 60*time.Second)
	const periods = 8
	rep, err := Run(ctx, env, Config{
		Prefix: "job/", Workers: 3, Period: 300 * time.Millisecond, TTL: time.Second,
		Periods: periods, StallIn: 2, Log: exenv.NewLog(exenv.TestWriter(t.Logf)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := 1; p <= periods; p++ {
		if len(rep.Runs[p]) != 1 || rep.Accepted[p] != 1 {
			t.Errorf("period %d: run by %v, %d writes accepted; want exactly one run", p, rep.Runs[p], rep.Accepted[p])
		}
	}
	if len(rep.Runs) != periods {
		t.Errorf("runs recorded for %d periods, want %d: %v", len(rep.Runs), periods, rep.Runs)
	}
	if rep.Frozen == "" || rep.TakenOverBy == "" || rep.TakenOverBy == rep.Frozen {
		t.Fatalf("frozen %q, taken over by %q: want another worker to take over", rep.Frozen, rep.TakenOverBy)
	}
	if got := rep.Runs[2]; len(got) != 1 || got[0] != rep.TakenOverBy {
		t.Errorf("period 2 (the frozen one's) was run by %v, want %s", got, rep.TakenOverBy)
	}
	if !errors.Is(rep.LateWrite, client.ErrLocked) {
		t.Errorf("the frozen leader's late write: %v, want ErrLocked", rep.LateWrite)
	}
	t.Logf("takeover after %v (TTL 1s)", rep.TakeoverAfter)
}
