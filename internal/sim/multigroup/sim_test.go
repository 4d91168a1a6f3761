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
// completed, clients were redirected, faults happened, leases expired,
// watches followed their store to another group.
func TestCorrectProtocol(t *testing.T) {
	t.Run("default", func(t *testing.T) { runCorrect(t, Config{}) })
	t.Run("harsh", func(t *testing.T) {
		runCorrect(t, Config{DropRate: 0.1, Faults: 10, OpsPerClient: 150, Moves: 10})
	})
}

func runCorrect(t *testing.T, base Config) {
	var moves, redirects, faults, ops, expiries, watchMoves int
	for _, seed := range seedList(*seeds) {
		cfg := base
		cfg.Seed = seed
		res, err := Run(cfg)
		if err != nil {
			t.Fatalf("%v\nreplay: go test ./internal/sim/multigroup -run '%s' -seed %d", err, t.Name(), seed)
		}
		t.Logf("seed %d: %d ops, %d unknown, %d redirects, %d moves, %d faults, %d lease expiries, %d watch events (%d moves followed), %.1f s simulated",
			seed, res.Ops, res.Unknown, res.Redirects, res.Moves, res.Faults, res.Expiries, res.WatchEvents, res.WatchMoves, float64(res.EndTime)/1e6)
		moves += res.Moves
		redirects += res.Redirects
		faults += res.Faults
		ops += res.Ops
		expiries += res.Expiries
		watchMoves += res.WatchMoves
	}
	if moves == 0 || redirects == 0 || faults == 0 || ops == 0 || expiries == 0 || watchMoves == 0 {
		t.Fatalf("the runs exercised too little: %d moves, %d redirects, %d faults, %d ops, %d lease expiries, %d watches followed a move",
			moves, redirects, faults, ops, expiries, watchMoves)
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
func catches(t *testing.T, bugs Bugs, want ...string) {
	t.Helper()
	for _, seed := range seedList(30) {
		_, err := Run(Config{Seed: seed, Bugs: bugs})
		if err == nil {
			continue
		}
		found := false
		for _, s := range want {
			found = found || strings.Contains(err.Error(), s)
		}
		if !found {
			t.Fatalf("seed %d failed, but not with any of %q: %v", seed, want, err)
		}
		t.Logf("caught: %v\nreplay: go test ./internal/sim/multigroup -run %s -seed %d -v", err, t.Name(), seed)
		return
	}
	t.Fatalf("no seed caught the bug %+v", bugs)
}

// TestCatchesAdoptBeforeCaughtUp: adopting a store on the target before
// its copy reached the source's fence loses the writes in between.
func TestCatchesAdoptBeforeCaughtUp(t *testing.T) {
	catches(t, Bugs{AdoptBeforeCaughtUp: true}, "not linearizable", "watch on store")
}

// TestCatchesNoSourceFence: a source that is not fenced keeps serving
// the store after the target adopted it.
func TestCatchesNoSourceFence(t *testing.T) {
	catches(t, Bugs{NoSourceFence: true}, "is served by groups")
}

// TestCatchesNoRevisionFloor: without the revision floor, the target
// hands out revisions below ones the source already issued: a watcher
// sees revisions go backwards, and fencing tokens shrink.
func TestCatchesNoRevisionFloor(t *testing.T) {
	catches(t, Bugs{NoRevisionFloor: true}, "watch on store", "not linearizable")
}

// TestCatchesNoLeaseMove: a target that takes a store's locks but not
// their leases refuses the holder's next renewal although its lease is
// live: the lock is silently lost.
func TestCatchesNoLeaseMove(t *testing.T) {
	catches(t, Bugs{NoLeaseMove: true}, "not linearizable")
}

// TestLeaseCheckCatchesEarlyExpiry: the lease check flags an expiry
// before the end its holder's last renewal promised, and accepts one
// after it. No protocol bug in the simulation shortens a lease (its
// clocks agree), so the check is shown able to fail on a history.
func TestLeaseCheckCatchesEarlyExpiry(t *testing.T) {
	acquire := record{cmd: command{kind: cmdAcquire, store: "s0", key: "k0"}, out: reply{token: 7}, callAt: 1000}
	renew := record{cmd: command{kind: cmdRenew, store: "s0", key: "k0", token: 7}, callAt: 30000}
	early := record{cmd: command{kind: cmdExpire, store: "s0", key: "k0", token: 7, at: 30000 + leaseTTL - 1}}
	onTime := early
	onTime.cmd.at = 30000 + leaseTTL
	if v := checkLeases([]record{acquire, renew, early}); len(v) != 1 || !strings.Contains(v[0], "token 7 expired") {
		t.Errorf("an early expiry: got %q, want one violation", v)
	}
	if v := checkLeases([]record{acquire, renew, onTime}); len(v) != 0 {
		t.Errorf("an expiry on time: got %q, want none", v)
	}
}

// TestValidate: a configuration the simulation cannot run is refused
// with a message naming the field, not run.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Members: 2, GroupSize: 3}, "GroupSize 3"},
		{Config{Groups: 1, Moves: 1}, "at least 2 data groups"},
		{Config{DropRate: 1}, "DropRate 1"},
	} {
		if _, err := Run(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}
