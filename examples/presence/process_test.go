package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
)

// TestProcessKilledNodeLeaves runs three nodes as processes of their own
// against three `dkv serve` processes, with a 2 s session TTL. Once each
// has seen all three join, node-3 is killed with SIGKILL: both others
// see it leave, each within the TTL plus 10 s of the kill, with nobody
// deregistering it. node-2 then stops on SIGTERM: it deregisters, and
// node-1 sees it leave.
func TestProcessKilledNodeLeaves(t *testing.T) {
	proctest.Skip(t)
	bin := proctest.Example(t, "presence")
	_, _, eps := proctest.Cluster(t)
	const ttl = 2 * time.Second
	run := fmt.Sprintf("t%d", time.Now().UnixNano())
	nodes := []string{"node-1", "node-2", "node-3"}
	g := proctest.Start(t, bin, []string{"--endpoints", eps, "--run", run, "--ttl", ttl.String()}, nodes...)
	const wait = 60 * time.Second
	for _, watcher := range nodes {
		for _, n := range nodes {
			proctest.Wait(t, g, wait, watcher+" seeing "+n+" join", 0, saw(watcher, "join", n))
		}
	}

	killed := g.Instance("node-3")
	t.Logf("kill -9 %s", killed)
	at := g.Len()
	start := time.Now()
	killed.Kill()
	bound := ttl + 10*time.Second
	for _, watcher := range nodes[:2] {
		proctest.Wait(t, g, bound+5*time.Second, watcher+" seeing node-3 leave", at, saw(watcher, "leave", "node-3"))
		if took := time.Since(start); took > bound {
			t.Errorf("%s saw the killed node-3 leave %v after the kill; want within the TTL plus 10s, %v", watcher, took, bound)
		} else {
			t.Logf("%s saw the killed node-3 leave %v after the kill (TTL %v)", watcher, took.Round(time.Millisecond), ttl)
		}
	}

	stopped := g.Instance("node-2")
	at = g.Len()
	if err := stopped.Stop(20 * time.Second); err != nil {
		t.Errorf("%s on SIGTERM: %v", stopped, err)
	}
	if _, _, ok := g.Find(at, proctest.Is("deregistered", "node-2")); !ok {
		t.Errorf("%s did not deregister on SIGTERM:%s", stopped, proctest.Describe(g, proctest.Is("", "node-2")))
	}
	_, left := proctest.Wait(t, g, wait, "node-1 seeing node-2 leave", at, saw("node-1", "leave", "node-2"))
	if got := left.Get("members"); got != "node-1" {
		t.Errorf("node-1's members after node-2 left: %q, want node-1 alone", got)
	}
	proctest.StopAll(t, g)
	for _, e := range g.Events() {
		if e.What == "failed" {
			t.Errorf("an instance failed: %s", e.Line)
		}
	}
}

// saw matches watcher's seeing change (join, leave) of member.
func saw(watcher, change, member string) func(exenv.Event) bool {
	return func(e exenv.Event) bool {
		return e.Instance == watcher && e.What == change && e.Get("member") == member
	}
}
