package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
)

var exactlyOnceDuration = flag.Duration("exactlyonce.duration", 0,
	"how long TestProcessExactlyOnceUnderFailover writes (default 15s, or $DKV_EXACTLYONCE_DURATION; the full run is 60s)")

// TestProcessExactlyOnceUnderFailover: three `dkv serve` processes, 32
// clients (each its own client.Client over every member) incrementing
// counters and enqueueing numbered jobs while the leader is killed with
// SIGKILL three times (each time restarted a few seconds later) and a
// follower is SIGSTOPped once for 3s. Afterwards every counter equals
// the increments its clients were told succeeded, every job a client was
// told it enqueued is in the queue exactly once and no other job is, and
// no client was told "outcome unknown".
func TestProcessExactlyOnceUnderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	d := *exactlyOnceDuration
	if d == 0 {
		d = 15 * time.Second
		if v := os.Getenv("DKV_EXACTLYONCE_DURATION"); v != "" {
			var err error
			if d, err = time.ParseDuration(v); err != nil {
				t.Fatalf("DKV_EXACTLYONCE_DURATION: %v", err)
			}
		}
	}
	ms := startProcCluster(t, 3)
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+3*time.Minute)
	defer cancel()
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool { return leaderOf(ctx, ms) != nil })
	waitSessions(t, eps)

	const clients, counters = 32, 4
	type tally struct {
		incs     [counters]int64 // increments told succeeded, per counter
		jobs     []string        // payloads told enqueued
		unknown  int
		refused  int // told not applied (ErrUnavailable, ctx before sending)
		failures []string
	}
	tallies := make([]tally, clients)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range clients {
		c, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		q, err := recipe.NewQueue(c, "eo")
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(i int, tl *tally) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				// Long enough to outlast an election and a paused member.
				octx, ocancel := context.WithTimeout(ctx, 20*time.Second)
				var err error
				if n%2 == 0 {
					k := n / 2 % counters
					if _, err = c.Counter(octx, "eo/ctr/"+strconv.Itoa(k), 1); err == nil {
						tl.incs[k]++
					}
				} else {
					p := fmt.Sprintf("c%02d-%06d", i, n)
					if _, err = q.Enqueue(octx, []byte(p)); err == nil {
						tl.jobs = append(tl.jobs, p)
					}
				}
				ocancel()
				switch {
				case err == nil:
				case errors.Is(err, client.ErrUnknownOutcome):
					tl.unknown++
					if tl.unknown <= 2 {
						tl.failures = append(tl.failures, "unknown outcome: "+err.Error())
					}
				case errors.Is(err, client.ErrUnavailable):
					tl.refused++
				default:
					tl.failures = append(tl.failures, err.Error())
				}
			}
		}(i, &tallies[i])
	}

	// The faults: three leader kills, each restarted 3s later, and one
	// follower paused for 3s, spread over d.
	step := d / 5
	for k := 0; k < 3; k++ {
		time.Sleep(step) // the schedule's spacing, not a synchronisation
		var l *testutil.Member
		testutil.Eventually(t, 30*time.Second, "a leader to kill", func() bool { l = leaderOf(ctx, ms); return l != nil })
		t.Logf("kill -9 leader %s", l.Name)
		l.Kill()
		time.Sleep(3 * time.Second) // the member stays dead this long
		l.Start(t)
	}
	time.Sleep(step / 2)
	var f *testutil.Member
	testutil.Eventually(t, 30*time.Second, "a follower to pause", func() bool {
		l := leaderOf(ctx, ms)
		for _, m := range ms {
			if l != nil && m != l && m.Running() {
				f = m
				return true
			}
		}
		return false
	})
	t.Logf("SIGSTOP follower %s for 3s", f.Name)
	if err := f.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the pause being tested
	if err := f.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(step / 2)
	close(stop)
	wg.Wait()

	var want [counters]int64
	told := map[string]bool{}
	var unknown, refused, ops int
	for i := range tallies {
		tl := &tallies[i]
		for k := range want {
			want[k] += tl.incs[k]
			ops += int(tl.incs[k])
		}
		for _, p := range tl.jobs {
			told[p] = true
		}
		ops += len(tl.jobs)
		unknown += tl.unknown
		refused += tl.refused
		for _, f := range tl.failures {
			t.Errorf("client %d: %s", i, f)
		}
	}
	t.Logf("%d writes acknowledged, %d refused unapplied, %d unknown outcomes", ops, refused, unknown)
	if unknown > 0 {
		t.Errorf("%d writes were told \"outcome unknown\"; with sessions a write is sent again until answered", unknown)
	}

	c, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for k := range want {
		key := "eo/ctr/" + strconv.Itoa(k)
		var got int64
		if kv, err := c.Get(ctx, key); err == nil {
			got, _ = strconv.ParseInt(string(kv.Value), 10, 64)
		} else if !errors.Is(err, client.ErrNotFound) {
			t.Fatal(err)
		}
		if got != want[k] {
			t.Errorf("counter %s = %d; its clients were told %d increments succeeded", key, got, want[k])
		}
	}
	q, err := recipe.NewQueue(c, "eo")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := q.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, j := range jobs {
		seen[string(j.Payload)]++
	}
	for p, n := range seen {
		switch {
		case n > 1:
			t.Errorf("job %s is in the queue %d times", p, n)
		case !told[p]:
			t.Errorf("job %s is in the queue, but its client was not told it was enqueued", p)
		}
	}
	for p := range told {
		if seen[p] == 0 {
			t.Errorf("job %s was acknowledged but is not in the queue", p)
		}
	}
	if len(told) == 0 || ops < 100 {
		t.Fatalf("only %d writes acknowledged (%d jobs): the test proves nothing", ops, len(told))
	}
}

// waitSessions waits until the cluster at eps offers client sessions.
func waitSessions(t *testing.T, eps []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: eps, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	servertest.WaitSessions(t, c)
}
