package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestProcessCLIPutDuringLeaderKill: `dkv put` run the moment the leader
// is killed (kill -9) waits for the new leader and succeeds, three times
// over; before client sessions it failed with "outcome unknown" (exit 7).
func TestProcessCLIPutDuringLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ms := startProcCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitSessions(t, eps)
	for round := 1; round <= 3; round++ {
		var l *testutil.Member
		testutil.Eventually(t, 30*time.Second, "a leader", func() bool { l = leaderOf(ctx, ms); return l != nil })
		// Leader first in the list: the CLI tries it first, as a user
		// who names it would.
		order := []string{l.ClientAddr}
		for _, e := range eps {
			if e != l.ClientAddr {
				order = append(order, e)
			}
		}
		key, val := fmt.Sprintf("cli/%d", round), fmt.Sprintf("v%d", round)
		// --timeout: the put waits for the new leader within it; the
		// default 5s usually suffices (an election here takes 1-3s), but
		// a split vote on a loaded machine can take longer.
		cmd := exec.CommandContext(ctx, testutil.DKVBinary(t), "put", "--timeout", "20s", "--endpoints", strings.Join(order, ","), key, val)
		l.Kill()
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("round %d: dkv put right after killing leader %s: %v after %v\n%s", round, l.Name, err, time.Since(start), out)
		}
		t.Logf("round %d: killed %s; dkv put succeeded in %v: %s", round, l.Name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
		c, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := c.Get(ctx, key)
		c.Close()
		if err != nil || string(kv.Value) != val || kv.Version != 1 {
			t.Fatalf("round %d: after the put, %s = %v (err %v), want %q at version 1", round, key, kv, err, val)
		}
		l.Start(t)
	}
}
