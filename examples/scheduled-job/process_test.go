package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
)

// TestProcessLeaderKilledThenFrozen runs three workers as processes of
// their own against three `dkv serve` processes, with 500 ms periods and
// a 2 s TTL. The leader is killed with SIGKILL; another worker takes
// over and runs the periods missed meanwhile. That leader is then
// frozen with SIGSTOP until a third has taken over and run past the
// period it was waiting for; thawed with SIGCONT, its late write is
// refused with Locked. At the end every period from the first to the
// last is recorded in the store exactly once (one write to its key), no
// period has two accepted runs, and the workers left stop cleanly on
// SIGTERM, the leader resigning.
func TestProcessLeaderKilledThenFrozen(t *testing.T) {
	proctest.Skip(t)
	bin := proctest.Example(t, "scheduled-job")
	_, cl, eps := proctest.Cluster(t)
	run := fmt.Sprintf("t%d", time.Now().UnixNano())
	prefix := "examples/scheduled-job/" + run + "/"
	g := proctest.Start(t, bin, []string{"--endpoints", eps, "--run", run, "--period", "500ms", "--ttl", "2s"}, "w1", "w2", "w3")

	// ranAfter waits for the worker's next accepted run after position from.
	ranAfter := func(from int, who string) (int, exenv.Event) {
		t.Helper()
		return proctest.Wait(t, g, 60*time.Second, who+" running a period", from, proctest.Is("ran", who))
	}
	_, lead := proctest.Wait(t, g, 60*time.Second, "a leader", 0, proctest.Is("leader", ""))
	i, _ := ranAfter(0, lead.Instance)
	ranAfter(i+1, lead.Instance)

	first := g.Instance(lead.Instance)
	t.Logf("kill -9 %s, the leader", first)
	killedAt := g.Len()
	first.Kill()
	i, second := proctest.Wait(t, g, 60*time.Second, "a new leader after the kill", killedAt, proctest.Is("leader", ""))
	i, _ = ranAfter(i, second.Instance)
	_, last := ranAfter(i+1, second.Instance)

	frozen := g.Instance(second.Instance)
	t.Logf("SIGSTOP %s, the leader, past its TTL", frozen)
	frozenAt := g.Len()
	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			frozen.Thaw()
		}
	}()
	// The frozen leader was about to run the period after its last
	// reported run; it thaws once another leader has run a later one.
	pending := last.Int("period") + 1
	i, third := proctest.Wait(t, g, 60*time.Second, "a new leader while "+frozen.String()+" is frozen", frozenAt, proctest.Is("leader", ""))
	if third.Instance == frozen.Name {
		t.Fatalf("the frozen %s was elected: %s", frozen, third.Line)
	}
	_, firstRun := proctest.Wait(t, g, 60*time.Second, third.Instance+"'s first run", i, proctest.Is("ran", third.Instance))
	takeover := firstRun.Int("period")
	proctest.Wait(t, g, 60*time.Second, fmt.Sprintf("%s running past period %d", third.Instance, pending), i,
		func(e exenv.Event) bool {
			return e.What == "ran" && e.Instance == third.Instance && e.Int("period") > pending
		})
	t.Logf("SIGCONT %s", frozen)
	thawAt := g.Len()
	if err := frozen.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	// Its first write with its old term is refused. (A run it prints
	// first of a period before the new leader's first was accepted before
	// the freeze took hold, its line not yet printed: catching up, a
	// leader runs overdue periods milliseconds apart, so there may be
	// more than one. A run of a later period is a late write accepted.)
	_, late := proctest.Wait(t, g, 60*time.Second, frozen.String()+"'s late write", thawAt, func(e exenv.Event) bool {
		return e.Instance == frozen.Name && (e.What == "refused" || e.What == "deposed" || e.What == "ran" && e.Int("period") >= takeover)
	})
	if late.What == "ran" || !strings.Contains(late.Get("err"), "locked") || late.Int("term") != second.Int("term") {
		t.Errorf("the thawed leader's late write: %s; want its write with its old term %d refused with Locked", late.Line, second.Int("term"))
	}
	i, _ = ranAfter(g.Len(), third.Instance)
	ranAfter(i+1, third.Instance)
	stopAt := g.Len()
	proctest.StopAll(t, g)
	if _, _, ok := g.Find(stopAt, proctest.Is("resigned", third.Instance)); !ok {
		t.Errorf("%s, the leader, did not resign on SIGTERM:%s", third.Instance, proctest.Describe(g, proctest.Is("", third.Instance)))
	}

	// What the store holds: one record per period, each written once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cl.List(ctx, prefix+"runs/")
	if err != nil {
		t.Fatal(err)
	}
	var prev int64
	for _, kv := range r.KVs {
		p, _ := strconv.ParseInt(strings.TrimPrefix(kv.Key, prefix+"runs/"), 10, 64)
		if kv.Version != 1 {
			t.Errorf("period %d: its record was written %d times (last by %s): the job ran more than once", p, kv.Version, kv.Value)
		}
		if prev != 0 && p != prev+1 {
			t.Errorf("periods %d to %d were never run", prev+1, p-1)
		}
		prev = p
	}
	if len(r.KVs) < 6 {
		t.Errorf("%d periods recorded, want at least 6", len(r.KVs))
	}
	ran := map[int][]string{}
	for _, e := range g.Events() {
		if e.What == "ran" {
			ran[e.Int("period")] = append(ran[e.Int("period")], e.Line)
		}
	}
	for p, lines := range ran {
		if len(lines) > 1 {
			t.Errorf("period %d ran %d times:\n  %s", p, len(lines), strings.Join(lines, "\n  "))
		}
	}
}
