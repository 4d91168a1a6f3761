package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

var failoverRounds = flag.Int("failover.rounds", 2, "leader kills in TestProcessClusterLeaderKill")

// startProcCluster starts n `dkv serve` processes as a new cluster
// (testutil.NewCluster), each with the extra flags. Each start of a
// member empties its log, so a test reading it sees that run's lines
// only; the members are killed when the test ends.
func startProcCluster(t *testing.T, n int, extra ...string) []*testutil.Member {
	t.Helper()
	return startProcClusterWith(t, testutil.ClusterOptions{Members: n, Args: extra})
}

// startProcClusterWith is startProcCluster with the options beyond extra
// flags: HTTP ports, a given token or none.
func startProcClusterWith(t *testing.T, o testutil.ClusterOptions) []*testutil.Member {
	t.Helper()
	o.FreshLogs, o.Kill = true, true
	return testutil.NewCluster(t, o).Members
}

func leaderOf(ctx context.Context, ms []*testutil.Member) *testutil.Member {
	for _, m := range ms {
		if !m.Running() {
			continue
		}
		c, err := client.New(ctx, client.Config{Endpoints: []string{m.ClientAddr}, DialTimeout: 500 * time.Millisecond, AutoSyncInterval: -1})
		if err != nil {
			continue
		}
		st, err := c.Status(ctx)
		c.Close()
		if err == nil && st.LeaderId == st.MemberId && st.LeaderId != 0 {
			return m
		}
	}
	return nil
}

// TestProcessClusterLeaderKill runs three real dkv serve processes, kills
// the leader with SIGKILL while a writer runs, measures the time from the
// kill to the next successful write, restarts the old leader, and checks
// that no acknowledged write was lost on any member.
func TestProcessClusterLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ms := startProcCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var (
		mu     sync.Mutex
		acked  = map[string]bool{}
		lastOK time.Time
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprintf("w/%06d", i)
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cl.Put(wctx, k, []byte(k))
			wcancel()
			if err == nil {
				mu.Lock()
				acked[k] = true
				lastOK = time.Now()
				mu.Unlock()
			} else if !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrUnknownOutcome) {
				t.Errorf("write %s: unexpected error %v", k, err)
				return
			}
		}
	}()
	waitWrites := func(after time.Time) time.Duration {
		t.Helper()
		var d time.Duration
		testutil.Eventually(t, 30*time.Second, "a successful write", func() bool {
			mu.Lock()
			defer mu.Unlock()
			if lastOK.After(after) {
				d = lastOK.Sub(after)
				return true
			}
			return false
		})
		return d
	}
	waitWrites(time.Now())
	var failovers []time.Duration
	for r := 0; r < *failoverRounds; r++ {
		var l *testutil.Member
		testutil.Eventually(t, 30*time.Second, "a leader", func() bool { l = leaderOf(ctx, ms); return l != nil })
		killed := time.Now()
		l.Kill()
		failovers = append(failovers, waitWrites(killed))
		l.Start(t)
	}
	close(stop)
	<-done
	sort.Slice(failovers, func(i, j int) bool { return failovers[i] < failovers[j] })
	t.Logf("failover (SIGKILL of leader to next acknowledged write) over %d rounds: min %v, median %v, max %v",
		len(failovers), failovers[0], failovers[len(failovers)/2], failovers[len(failovers)-1])

	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("no acknowledged writes")
	}
	for _, m := range ms {
		mc, err := client.New(ctx, client.Config{Endpoints: []string{m.ClientAddr}, DialTimeout: 20 * time.Second, AutoSyncInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		var res *client.RangeResult
		testutil.Eventually(t, 30*time.Second, m.Name+" serving linearizable reads", func() bool {
			res, err = mc.List(ctx, "w/")
			return err == nil
		})
		got := map[string]bool{}
		for _, kv := range res.KVs {
			got[kv.Key] = true
		}
		for k := range acked {
			if !got[k] {
				t.Errorf("%s lost acknowledged write %s", m.Name, k)
			}
		}
		mc.Close()
	}
	t.Logf("%d acknowledged writes, all present on all %d members", len(acked), len(ms))
}
