package multigroup

import (
	"flag"
	"strings"
	"testing"
)

var (
	seedFlag = flag.Uint64("seed", 0, "run only this seed")
	seeds    = flag.Int("seeds", 20, "how many seeds the correct protocol runs")
)

func seedList(n int) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// TestCorrectProtocol: with the protocol as designed, every seed keeps
// every invariant while stores move under crashes, partitions and lost
// messages, and the run actually did what it is meant to test: moves
// completed, clients were redirected, faults happened.
func TestCorrectProtocol(t *testing.T) {
	t.Run("default", func(t *testing.T) { runCorrect(t, Config{}) })
	t.Run("harsh", func(t *testing.T) {
		runCorrect(t, Config{DropRate: 0.1, Faults: 10, OpsPerClient: 150, Moves: 10})
	})
}

func runCorrect(t *testing.T, base Config) {
	var moves, redirects, faults, ops int
	for _, seed := range seedList(*seeds) {
		cfg := base
		cfg.Seed = seed
		res, err := Run(cfg)
		if err != nil {
			t.Fatalf("%v\nreplay: go test ./internal/sim/multigroup -run '%s' -seed %d", err, t.Name(), seed)
		}
		t.Logf("seed %d: %d ops, %d unknown, %d redirects, %d moves, %d faults, %.1f s simulated",
			seed, res.Ops, res.Unknown, res.Redirects, res.Moves, res.Faults, float64(res.EndTime)/1e6)
		moves += res.Moves
		redirects += res.Redirects
		faults += res.Faults
		ops += res.Ops
	}
	if moves == 0 || redirects == 0 || faults == 0 || ops == 0 {
		t.Fatalf("the runs exercised too little: %d moves, %d redirects, %d faults, %d ops", moves, redirects, faults, ops)
	}
}

// TestDeterministic: a seed replays exactly.
func TestDeterministic(t *testing.T) {
	a, errA := Run(Config{Seed: 42})
	b, errB := Run(Config{Seed: 42})
	if a.Ops != b.Ops || a.Unknown != b.Unknown || a.Redirects != b.Redirects || a.EndTime != b.EndTime || (errA == nil) != (errB == nil) {
		t.Fatalf("seed 42 ran twice differently: %+v %v / %+v %v", a, errA, b, errB)
	}
}

// catches runs seeds with a bug injected until one fails, and asserts
// the failure is the invariant the bug breaks. It logs the seed and the
// message, so the failure can be replayed.
func catches(t *testing.T, bugs Bugs, want string) {
	t.Helper()
	for _, seed := range seedList(30) {
		_, err := Run(Config{Seed: seed, Bugs: bugs})
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("seed %d failed, but not with %q: %v", seed, want, err)
		}
		t.Logf("caught: %v\nreplay: go test ./internal/sim/multigroup -run %s -seed %d -v", err, t.Name(), seed)
		return
	}
	t.Fatalf("no seed caught the bug %+v", bugs)
}

// TestCatchesAdoptBeforeCaughtUp: adopting a store on the target before
// its copy reached the source's handoff loses the writes in between.
func TestCatchesAdoptBeforeCaughtUp(t *testing.T) {
	catches(t, Bugs{AdoptBeforeCaughtUp: true}, "not linearizable")
}

// TestCatchesNoSourceFence: a source that is not fenced keeps serving
// the store after the target adopted it.
func TestCatchesNoSourceFence(t *testing.T) {
	catches(t, Bugs{NoSourceFence: true}, "is served by groups")
}

// TestCatchesNoRevisionFloor: without the revision floor, the target
// hands out fencing tokens below ones the source already issued.
func TestCatchesNoRevisionFloor(t *testing.T) {
	catches(t, Bugs{NoRevisionFloor: true}, "not linearizable")
}
