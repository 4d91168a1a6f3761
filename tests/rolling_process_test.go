package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

// sigterm stops m as an init system would and waits for it to exit.
func sigterm(t testing.TB, m *testutil.Member) {
	t.Helper()
	m.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.Exited():
	case <-time.After(40 * time.Second):
		t.Fatalf("%s did not exit within 40s of SIGTERM", m.Name)
	}
}

// jsonLogLines returns the lines of m's log that are JSON log records
// (the others are serve's stdout: addresses, "ready", ...).
func jsonLogLines(t testing.TB, m *testutil.Member) []map[string]any {
	t.Helper()
	f, err := os.Open(m.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%s: log line is not JSON: %v\n%s", m.Name, err, line)
		}
		out = append(out, rec)
	}
	return out
}

// memberClient is a client of m alone.
func memberClient(t testing.TB, ctx context.Context, m *testutil.Member) *client.Client {
	t.Helper()
	c, err := client.New(ctx, client.Config{Endpoints: []string{m.ClientAddr}, DialTimeout: 10 * time.Second, AutoSyncInterval: -1, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitServing waits until m serves a linearizable read: it has a leader
// and has applied everything committed before the read.
func waitServing(t testing.TB, ctx context.Context, m *testutil.Member) {
	t.Helper()
	c := memberClient(t, ctx, m)
	testutil.Eventually(t, 60*time.Second, m.Name+" serving linearizable reads", func() bool {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.Get(rctx, "probe")
		return err == nil || errors.Is(err, client.ErrNotFound)
	})
}

// TestProcessLeaderSIGTERMHandsOver: a leader stopped with SIGTERM hands
// leadership to another voter before it exits, so by the time its process
// is gone another member already leads (without the hand-over the others
// keep following the dead leader until their election timeout, a second
// or more, and answer that there is none), and its JSON log says so.
func TestProcessLeaderSIGTERMHandsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ms := startProcCluster(t, 3, "--log-format", "json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, m := range ms {
		waitServing(t, ctx, m)
	}
	var l *testutil.Member
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool { l = leaderOf(ctx, ms); return l != nil })
	// Dialled before the SIGTERM so the check right after the exit is
	// one round trip.
	others := map[*testutil.Member]*client.Client{}
	for _, m := range ms {
		if m != l {
			others[m] = memberClient(t, ctx, m)
			if _, err := others[m].Status(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	lst, err := memberClient(t, ctx, l).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sigterm(t, l)
	var leaders []string
	for m, c := range others {
		sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
		st, err := c.Status(sctx)
		scancel()
		if err != nil {
			t.Errorf("status of %s right after %s exited: %v", m.Name, l.Name, err)
			continue
		}
		if st.LeaderId == st.MemberId && st.LeaderId != lst.MemberId {
			leaders = append(leaders, m.Name)
		}
		t.Logf("%s right after %s exited: leader %x (it is %x, the old leader %x)", m.Name, l.Name, st.LeaderId, st.MemberId, lst.MemberId)
	}
	if len(leaders) != 1 {
		t.Fatalf("when the SIGTERMed leader %s had exited, %d other members led (%v), want 1: leadership was not handed over", l.Name, len(leaders), leaders)
	}
	var handed bool
	for _, rec := range jsonLogLines(t, l) {
		if rec["msg"] == "stopping: leadership handed over" && rec["to"] == leaders[0] {
			handed = true
		}
	}
	if !handed {
		t.Errorf("%s's log has no JSON record {\"msg\":\"stopping: leadership handed over\",\"to\":%q}", l.Name, leaders[0])
	}
}

// TestProcessRollingRestartUnderLoad restarts each member of a 3-node
// cluster in turn with SIGTERM, the leader last, while 64 clients write,
// and checks that no client saw an error other than the documented
// retryable one (Unavailable: nothing was written) and that no
// acknowledged write is missing afterwards on any member. The time without
// a leader during each restart is measured and logged, not asserted.
func TestProcessRollingRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	const writers = 64
	ms := startProcCluster(t, 3, "--log-format", "json")
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, m := range ms {
		waitServing(t, ctx, m)
	}

	type result struct {
		acked             map[string]string
		unavailable, unkn int
		unknownErrs       []string
		others            []string
	}
	results := make([]result, writers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[w]
			r.acked = map[string]string{}
			// UnresponsiveTimeout above its 1s default: on this shared
			// 2-core machine, 64 writers starting at once can starve a
			// member's answers for a second before any restart, and the
			// client then gives up the writes in flight as unknown
			// outcomes (seen: 1-2 of ~4000, all in the first second; at
			// 5s once more in CI, at the first put, before any restart,
			// with every package of ./... sharing the cores). A graceful
			// stop closes connections, which this does not hide.
			c, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second, UnresponsiveTimeout: 15 * time.Second})
			if err != nil {
				r.others = append(r.others, err.Error())
				return
			}
			defer c.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("w/%02d/%06d", w, i), fmt.Sprintf("v%d-%d", w, i)
				pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.Put(pctx, k, []byte(v))
				pcancel()
				switch {
				case err == nil:
					r.acked[k] = v
				case errors.Is(err, client.ErrUnavailable):
					r.unavailable++
				case errors.Is(err, client.ErrUnknownOutcome):
					r.unkn++
					r.unknownErrs = append(r.unknownErrs, fmt.Sprintf("put %s at %s: %v", k, time.Now().Format("15:04:05.000"), err))
				default:
					r.others = append(r.others, fmt.Sprintf("put %s: %v", k, err))
				}
			}
		}()
	}

	// Leaderless time: a poller asks every member who leads, every 10ms;
	// a round in which members answered and none leads counts.
	probes := make([]*client.Client, len(ms))
	for i, m := range ms {
		probes[i] = memberClient(t, ctx, m)
	}
	var (
		lmu        sync.Mutex
		leaderless time.Duration
	)
	pollDone := make(chan struct{})
	pollStop := make(chan struct{})
	go func() {
		defer close(pollDone)
		last := time.Now()
		for {
			select {
			case <-pollStop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			// Every member at once; a member that does not answer
			// (stopped, or slow under the load) neither proves nor
			// disproves a leader.
			var answered, led atomic.Bool
			var pw sync.WaitGroup
			for _, c := range probes {
				pw.Add(1)
				go func() {
					defer pw.Done()
					sctx, scancel := context.WithTimeout(ctx, time.Second)
					st, err := c.Status(sctx)
					scancel()
					if err != nil {
						return
					}
					answered.Store(true)
					if st.LeaderId != 0 && st.LeaderId == st.MemberId {
						led.Store(true)
					}
				}()
			}
			pw.Wait()
			now := time.Now()
			if answered.Load() && !led.Load() {
				lmu.Lock()
				leaderless += now.Sub(last)
				lmu.Unlock()
			}
			last = now
		}
	}()
	takeLeaderless := func() time.Duration {
		lmu.Lock()
		defer lmu.Unlock()
		d := leaderless
		leaderless = 0
		return d
	}

	progress := func(what string) {
		t.Helper()
		// The load is running: a fresh write through the whole cluster
		// succeeds within the deadline.
		pc, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		testutil.Eventually(t, 60*time.Second, what, func() bool {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			defer pcancel()
			_, err := pc.Put(pctx, "progress", []byte(what))
			return err == nil
		})
	}
	progress("writes before the restarts")
	takeLeaderless()

	// Followers first, the leader last.
	var order []*testutil.Member
	var l *testutil.Member
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool { l = leaderOf(ctx, ms); return l != nil })
	for _, m := range ms {
		if m != l {
			order = append(order, m)
		}
	}
	order = append(order, l)
	for _, m := range order {
		role := "follower"
		if m == l {
			role = "leader"
		}
		start := time.Now()
		sigterm(t, m)
		stopped := time.Since(start)
		m.Start(t)
		waitServing(t, ctx, m)
		progress("writes after restarting " + m.Name)
		t.Logf("%s: restarted %s (%s): stopped in %v, back and serving after %v; time without a leader: %v",
			time.Now().Format("15:04:05.000"), m.Name, role, stopped.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), takeLeaderless().Round(time.Millisecond))
	}
	close(stop)
	wg.Wait()
	close(pollStop)
	<-pollDone

	acked := map[string]string{}
	var unavailable, unknown int
	var others, unknownErrs []string
	for _, r := range results {
		for k, v := range r.acked {
			acked[k] = v
		}
		unavailable += r.unavailable
		unknown += r.unkn
		others = append(others, r.others...)
		unknownErrs = append(unknownErrs, r.unknownErrs...)
	}
	t.Logf("%d writers: %d acknowledged writes, %d Unavailable (retryable, not written), %d unknown outcome, %d other errors",
		writers, len(acked), unavailable, unknown, len(others))
	for i, e := range others {
		if i == 10 {
			t.Errorf("... and %d more", len(others)-10)
			break
		}
		t.Errorf("non-retryable error: %s", e)
	}
	for _, e := range unknownErrs {
		t.Logf("unknown outcome: %s", e)
	}
	if unknown > 0 {
		t.Errorf("%d writes ended with an unknown outcome during a graceful rolling restart, want 0", unknown)
	}
	if len(acked) == 0 {
		t.Fatal("no acknowledged writes")
	}
	for _, m := range ms {
		mc := memberClient(t, ctx, m)
		var res *client.RangeResult
		testutil.Eventually(t, 30*time.Second, m.Name+" listing w/", func() bool {
			var err error
			res, err = mc.List(ctx, "w/")
			return err == nil
		})
		got := make(map[string]string, len(res.KVs))
		for _, kv := range res.KVs {
			got[kv.Key] = string(kv.Value)
		}
		lost := 0
		for k, v := range acked {
			if got[k] != v {
				if lost < 5 {
					t.Errorf("%s: acknowledged write %s=%s reads back as %q", m.Name, k, v, got[k])
				}
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("%s lost %d of %d acknowledged writes", m.Name, lost, len(acked))
		}
	}
}

// buildVersioned builds dkv with server.Version set to v.
func buildVersioned(t *testing.T, v string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dkv-"+v)
	out, err := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/dkv-io/dkv/server.Version="+v, "github.com/dkv-io/dkv/cmd/dkv").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestProcessVersionRule: a member records its version in the member
// table (dkv member list shows it); a binary one minor version away joins
// and runs; one two minor versions away is refused, both when it joins
// and when it is started on an existing member's data dir.
func TestProcessVersionRule(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	bin := testutil.DKVBinary(t) // server.Version as committed: 0.3.x
	v04, v05 := buildVersioned(t, "0.4.0"), buildVersioned(t, "0.5.0")
	ms := startProcCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitServing(t, ctx, ms[0])
	dir := t.TempDir()
	joinArgs := func(name string) []string {
		return []string{"serve", "--name", name, "--join", ms[0].ClientAddr, "--client-addr", testutil.FreeAddr(t), "--peer-addr", testutil.FreeAddr(t),
			"--http-addr", "", "--data-dir", filepath.Join(dir, name), "--peer-secret-file", filepath.Join(ms[0].Dir, "peer-secret")}
	}

	// Two minor versions away: refused before it is added.
	jctx, jcancel := context.WithTimeout(ctx, 60*time.Second)
	out, err := exec.CommandContext(jctx, v05, joinArgs("far")...).CombinedOutput()
	jcancel()
	if err == nil || !strings.Contains(string(out), "2 minor versions apart") {
		t.Fatalf("joining with dkv 0.5.0 beside 0.3: err %v, want a refusal naming the rule; output:\n%s", err, out)
	}

	// One minor version away: joins.
	near := &testutil.Member{Name: "near", Dir: filepath.Join(dir, "near"), Bin: v04, Args: joinArgs("near")}
	near.Start(t)
	t.Cleanup(func() {
		if near.Running() {
			near.Kill()
		}
	})
	var list string
	testutil.Eventually(t, 60*time.Second, "member list showing both versions", func() bool {
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		defer lcancel()
		b, _ := exec.CommandContext(lctx, bin, "--endpoints", ms[0].ClientAddr, "member", "list").CombinedOutput()
		list = string(b)
		return strings.Contains(list, " 0.3.") && strings.Contains(list, " 0.4.0 ")
	})
	t.Logf("dkv member list:\n%s", list)
	if !strings.Contains(list, "VERSION") {
		t.Errorf("member list has no VERSION column:\n%s", list)
	}

	// The member's data dir, started with a binary two minor versions
	// from the recorded 0.3: refused at start.
	sigterm(t, near)
	sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
	out, err = exec.CommandContext(sctx, v05, near.Args...).CombinedOutput()
	scancel()
	if err == nil || !strings.Contains(string(out), "refusing to start") || !strings.Contains(string(out), "2 minor versions apart") {
		t.Fatalf("restarting a member with dkv 0.5.0 beside 0.3: err %v, want a refusal naming the rule; output:\n%s", err, out)
	}
}
