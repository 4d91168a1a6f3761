package chaos

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/tests"
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
	c := tests.NewCluster(t, 3, server.Config{UnsafeLocalReads: true, NoSync: true})
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
