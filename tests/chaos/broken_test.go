package chaos

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestCheckerCatchesUnsafeLocalReads proves the suite can fail: with
// linearizable reads served locally (no ReadIndex) and a follower
// partitioned away, clients pinned to that follower read stale values
// after other clients' writes were acknowledged, and porcupine must call
// the history illegal and leave its visualisation behind.
func TestCheckerCatchesUnsafeLocalReads(t *testing.T) {
	if os.Getenv("DKV_ARTIFACTS") == "" {
		t.Setenv("DKV_ARTIFACTS", t.TempDir())
	}
	c := servertest.NewCluster(t, 3, server.Config{UnsafeLocalReads: true, NoSync: true})
	nem := newInprocNemesis(c, []string{"isolate-follower"})
	ctx := context.Background()
	kvs, closeAll, err := pinnedClients(ctx, nem.Endpoints(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	suite := &Suite{
		Seed: 1, Duration: 8 * time.Second, Nemesis: nem,
		Workloads: []Workload{&KVWorkload{Clients: kvs, Seed: 1}},
		Checkers:  []Checker{Linearizability{}},
		Logf:      t.Logf,
	}
	res := suite.Run(ctx)
	t.Logf("broken build run:\n%s", res.Report(1))
	if res.Stats.Faults["isolate-follower"] == 0 {
		t.Fatal("no partition was injected")
	}
	var caught *Anomaly
	for i, a := range res.Anomalies {
		if a.Checker == "linearizability" {
			caught = &res.Anomalies[i]
			break
		}
	}
	if caught == nil {
		t.Fatal("porcupine accepted a history of stale local reads under a partition")
	}
	if _, err := os.Stat(caught.Artifact); err != nil {
		t.Fatalf("no visualisation at %q: %v", caught.Artifact, err)
	}
}

// TestCheckerCatchesUnboundedDrift proves the lease-safety checker can
// fail, and why LeaseMaxClockDrift exists: servers that assume no drift,
// with the leader's lease clock running 2x fast, expire a lease well
// before its TTL has really passed since its last renewal, and readers
// find its key gone while the keeper still holds it.
func TestCheckerCatchesUnboundedDrift(t *testing.T) {
	c := newSkewedCluster(t, server.Config{NoSync: true, LeaseMaxClockDrift: -1})
	nem := newInprocNemesis(c, []string{"clock-drift"})
	nem.overdrive = 1.5
	ctx := context.Background()
	kvs, closeAll, err := pinnedClients(ctx, nem.Endpoints(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	cls := asClients(kvs)
	lw := &LeaseWorkload{Keeper: cls[0], Readers: cls, Seed: 1, OpTimeout: time.Second}
	renewLate(lw)
	suite := &Suite{
		Seed: 1, Duration: 8 * time.Second, Nemesis: nem,
		// One long spell of a 2x fast leader clock (target 5): each lease
		// is due about 2 s after its grant or renewal instead of 4 s, a
		// second before the next renewal.
		Faults:    []Fault{{At: 500 * time.Millisecond, Kind: "clock-drift", Target: 5, Hold: 6500 * time.Millisecond}},
		Workloads: []Workload{lw},
		Checkers:  []Checker{LeaseSafety{}},
		Logf:      t.Logf,
	}
	res := suite.Run(ctx)
	t.Logf("broken build run:\n%s", res.Report(1))
	if res.Stats.Faults["clock-drift"] == 0 {
		t.Fatal("no clock drift was injected")
	}
	for _, a := range res.Anomalies {
		if a.Checker == "lease-safety" {
			return
		}
	}
	t.Fatal("the lease-safety checker accepted leases expired by a 2x fast leader clock with no drift bound")
}

// renewLate makes the lease workload renew 3 s into its 4 s TTL. At the
// default TTL/4 a lease outlives a leader clock up to 4x fast, so the
// early expiry of the broken runs would have no time to show.
func renewLate(lw *LeaseWorkload) {
	lw.TTL, lw.RenewEvery = 4*time.Second, 3*time.Second
}
