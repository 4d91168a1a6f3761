package chaos

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/dkv-io/dkv/server"
)

var (
	flagSeed     = flag.Int64("chaos.seed", 0, "fault schedule seed (0: pick one and print it)")
	flagDuration = flag.Duration("chaos.duration", 0, "total chaos run, split between the in-process and the process cluster (0: a short smoke run)")
	flagUnsafe   = flag.Bool("chaos.unsafe-local-reads", false, "run the in-process cluster in the deliberately broken UnsafeLocalReads mode (the run must then fail)")
	flagKinds    = flag.String("chaos.kinds", "", "comma-separated fault kinds to draw from (default: all)")
	flagDrift    = flag.Bool("chaos.unbounded-drift", false, "run the in-process cluster with no lease clock-drift bound while clock-drift faults make the leader's clock 1.5-2x fast (default kinds: clock-drift only; the run must then fail)")
)

func seed(t *testing.T) int64 {
	s := *flagSeed
	if s == 0 {
		s = time.Now().UnixNano() % 1_000_000_000
	}
	return s
}

func phaseDuration() time.Duration {
	if *flagDuration == 0 {
		return 6 * time.Second
	}
	return *flagDuration / 2
}

// TestChaos is `make chaos`: a randomized fault schedule against a
// 3-node in-process cluster, then against 3 `dkv serve` processes behind
// fault proxies, with every checker over each. It prints the seed, the
// operations, histories checked, faults by kind and anomalies, and fails
// on any anomaly. Without -chaos.duration it is a short smoke run.
func TestChaos(t *testing.T) {
	s := seed(t)
	t.Logf("chaos seed %d (replay: make chaos SEED=%d DURATION=%v)", s, s, 2*phaseDuration())
	total := NewStats()
	var anomalies []Anomaly
	report := func(phase string, r Result) {
		total.Merge(r.Stats)
		anomalies = append(anomalies, r.Anomalies...)
		fmt.Printf("=== chaos %s phase\n%s", phase, r.Report(s))
	}
	t.Run("inprocess", func(t *testing.T) {
		report("in-process", runInProcess(t, s, phaseDuration(), *flagUnsafe, *flagDrift))
	})
	t.Run("process", func(t *testing.T) { report("process", runProcesses(t, s, phaseDuration())) })
	fmt.Printf("=== chaos total\nseed:              %d\n%sanomalies:         %d\n", s, total.Summary(), len(anomalies))
	if len(anomalies) > 0 {
		t.Fatalf("%d anomalies (seed %d)", len(anomalies), s)
	}
}

func kindsOr(all []string) []string {
	if *flagKinds == "" {
		return all
	}
	var out []string
	for _, k := range splitComma(*flagKinds) {
		for _, a := range all {
			if a == k {
				out = append(out, k)
			}
		}
	}
	if len(out) == 0 {
		return all
	}
	return out
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// runInProcess runs the suite against a 3-node in-process cluster. unsafe
// and unboundedDrift are the deliberately broken modes of
// -chaos.unsafe-local-reads and -chaos.unbounded-drift.
func runInProcess(t *testing.T, seed int64, d time.Duration, unsafe, unboundedDrift bool) Result {
	base := server.Config{UnsafeLocalReads: unsafe, NoSync: true, LeaseMaxClockDrift: inprocLeaseDrift}
	if unboundedDrift {
		base.LeaseMaxClockDrift = -1 // none: the leader trusts its fast clock
	}
	kinds := kindsOr(inprocKinds)
	if unboundedDrift && *flagKinds == "" {
		kinds = []string{"clock-drift"}
	}
	c := newSkewedCluster(t, base)
	nem := newInprocNemesis(c, kinds)
	nem.logf = t.Logf
	if unboundedDrift {
		nem.overdrive = 1.5
	}
	ctx := context.Background()
	kvs, closeAll, err := pinnedClients(ctx, nem.Endpoints(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	coord := CoordWorkloads(asClients(kvs), seed, d, time.Second)
	if unboundedDrift {
		for _, w := range coord {
			if lw, ok := w.(*LeaseWorkload); ok {
				renewLate(lw)
			}
		}
	}
	suite := &Suite{
		Seed: seed, Duration: d, Nemesis: nem,
		Workloads: append([]Workload{&KVWorkload{Clients: kvs, Seed: seed}}, coord...),
		Checkers:  append(DefaultCheckers(), CoordCheckers()...),
		Logf:      t.Logf,
	}
	return suite.Run(ctx)
}
