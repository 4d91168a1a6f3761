package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/proctest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestScenarioTable: every row names an example (a folder beside this
// one with a main.go), once, with instances and a fault to play.
func TestScenarioTable(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range scenarios {
		if seen[sc.name] {
			t.Errorf("scenario %s appears twice", sc.name)
		}
		seen[sc.name] = true
		if _, err := os.Stat(filepath.Join("..", sc.name, "main.go")); err != nil {
			t.Errorf("scenario %s: no example: %v", sc.name, err)
		}
		if len(sc.instances) == 0 || sc.fault == nil || sc.about == "" {
			t.Errorf("scenario %s: instances %v, a fault: %v, about %q", sc.name, sc.instances, sc.fault != nil, sc.about)
		}
		for name := range sc.extra {
			if !strings.Contains(strings.Join(sc.instances, " "), name) {
				t.Errorf("scenario %s: arguments for %s, which it does not start", sc.name, name)
			}
		}
	}
}

// TestDriverPlaysPresence plays one scenario as `go run ./examples/run
// presence` does: its cluster, its instances, its kill -9, its outcome,
// and everything stopped at the end, each instance cleanly.
func TestDriverPlaysPresence(t *testing.T) {
	proctest.Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out testutil.LockedBuffer
	err := play(ctx, &out, find("presence"), testutil.DKVBinary(t), false)
	t.Logf("the driver's output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"run: kill -9 node-3[",
		"run: node-1 and node-2 saw node-3 leave",
		"run: the group's members now: node-1, node-2, node-3",
		"run: stopping the instances with SIGTERM",
		"run: the cluster stopped",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the driver's output has no %q", want)
		}
	}
	if n := strings.Count(out.String(), "exited status=0"); n != 3 {
		t.Errorf("%d instances exited with status 0 at the end, want 3", n)
	}
}

// playScenario plays the scenario name as `go run ./examples/run NAME`
// does, fails the test if the driver reports the outcome wrong, and
// returns the driver's output after checking that it holds each of want
// and that everything was stopped at the end, each instance still
// running cleanly.
func playScenario(t *testing.T, name string, want ...string) string {
	t.Helper()
	proctest.Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out testutil.LockedBuffer
	err := play(ctx, &out, find(name), testutil.DKVBinary(t), false)
	t.Logf("the driver's output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range append(want, "run: stopping the instances with SIGTERM", "run: the cluster stopped") {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the driver's output has no %q", w)
		}
	}
	if strings.Contains(out.String(), "did not stop cleanly") {
		t.Errorf("an instance did not stop cleanly on SIGTERM")
	}
	return out.String()
}

// TestDriverPlaysCart: two shopper processes add to one cart through
// the proxy process while an instance is killed; the cart is whole.
func TestDriverPlaysCart(t *testing.T) {
	playScenario(t, "cart",
		"run: kill -9 B[",
		"cart=whole",
		"run: the cart is whole: every answered add in it once, none lost, across the kill of B")
}

// TestDriverPlaysReconcile: a child and then the leading reconciler are
// killed; every divergence is repaired by one action, none repeated.
func TestDriverPlaysReconcile(t *testing.T) {
	playScenario(t, "reconcile",
		"run: kill -9 web-1's child",
		"run: kill -9 ctl-",
		"run: every divergence repaired by one action, none repeated, across the kill of a child and of the leader")
}

// TestDriverPlaysCanary: the canary turns faulty and the leading
// controller is killed after its first decision; the next leader rolls
// it back, each stage decided once.
func TestDriverPlaysCanary(t *testing.T) {
	playScenario(t, "canary",
		"run: kill -9 controller-",
		"decision=rollback",
		"run: the faulty canary was rolled back by the next leader, each stage decided once, across the kill of the leading controller")
}

// TestDriverPlaysReact: a consumer killed mid-stream and started again
// handles every change once, as do the two left running.
func TestDriverPlaysReact(t *testing.T) {
	playScenario(t, "react",
		"run: kill -9 r2[",
		"] resuming from=",
		"run: every consumer handled every change once, r2 across its kill -9 and restart")
}
