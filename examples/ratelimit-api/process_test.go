package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/proctest"
)

// TestProcessThreeInstancesOneLimit runs three instances of the API as
// processes of their own, each with its own client, against three `dkv
// serve` processes, and a fourth process of callers sending requests
// for one API key round-robin across them for 4 s. Summed over the
// three, the key gets at most burst + limit × elapsed / period, at
// least the burst; every refusal is a 429 with a Retry-After, and every
// request got one or the other. The instances stop cleanly on SIGTERM.
func TestProcessThreeInstancesOneLimit(t *testing.T) {
	proctest.Skip(t)
	bin := proctest.Example(t, "ratelimit-api")
	_, _, eps := proctest.Cluster(t)
	run := fmt.Sprintf("t%d", time.Now().UnixNano())
	g := proctest.Start(t, bin, []string{"--endpoints", eps, "--run", run, "--limit", "5", "--burst", "5"}, "A", "B", "C")
	const wait = 60 * time.Second
	var urls []string
	for _, name := range []string{"A", "B", "C"} {
		_, l := proctest.Wait(t, g, wait, name+" listening", 0, proctest.Is("listening", name))
		urls = append(urls, l.Get("url"))
	}
	if _, err := g.Start("caller", "--call", strings.Join(urls, ","), "--window", "4s", "--callers", "6"); err != nil {
		t.Fatal(err)
	}
	_, called := proctest.Wait(t, g, wait, "the callers' tally", 0, proctest.Is("called", "caller"))
	proctest.Wait(t, g, wait, "the callers' exit", 0, proctest.Is("stopped", "caller"))
	proctest.StopAll(t, g)

	allowed, bound := called.Int("allowed"), mustFloat(t, called.Get("bound"))
	t.Logf("%d allowed, %d refused in %s; bound %.1f; by instance (allowed/refused): %s",
		allowed, called.Int("refused"), called.Get("elapsed"), bound, called.Get("by_instance"))
	if float64(allowed) > bound {
		t.Errorf("%d requests allowed across the three instances; the shared limit allows at most %.1f", allowed, bound)
	}
	if allowed < 5 {
		t.Errorf("%d requests allowed; a full bucket allows at least the burst, 5", allowed)
	}
	if called.Int("refused") == 0 {
		t.Errorf("no request refused: the callers did not reach the limit")
	}
	if n := called.Int("other"); n != 0 {
		t.Errorf("%d requests got neither 200 nor 429", n)
	}
	if n := called.Int("bad_refusals"); n != 0 {
		t.Errorf("%d refusals lacked 429 with a Retry-After of at least 1s", n)
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return f
}
