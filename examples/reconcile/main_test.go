package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func runScenario(t *testing.T, kill bool) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	env, err := exenv.OpenEmbedded(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	rep, err := Run(ctx, env, Config{Prefix: "rec/", TTL: time.Second, Kill: kill, Log: exenv.NewLog(exenv.TestWriter(t.Logf))})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkScript asserts the actions of the script, per round.
func checkScript(t *testing.T, rep *Report) {
	t.Helper()
	round1 := slices.Sorted(slices.Values(rep.Applied[1]))
	if want := []string{"start web-3 v2", "stop alt-1", "update web-1 v2"}; !slices.Equal(round1, want) {
		t.Errorf("round 1 applied %v, want exactly %v (each once)", rep.Applied[1], want)
	}
	if len(rep.Applied[2]) != 0 {
		t.Errorf("round 2 applied %v, want nothing", rep.Applied[2])
	}
	if want := []string{"start web-2 v2"}; !slices.Equal(rep.Applied[3], want) {
		t.Errorf("round 3 applied %v, want %v", rep.Applied[3], want)
	}
}

func TestReconcileScript(t *testing.T) {
	rep := runScenario(t, false)
	checkScript(t, rep)
	for _, a := range rep.All {
		if a.Err != nil {
			t.Errorf("%s's %q was refused without a fault: %v", a.Controller, a.What, a.Err)
		}
	}
}

// TestReconcileLeaderKilledMidRound is the scenario's claim: the leader
// dies after its first action of round 1; the other controller finishes
// the round without repeating an action, the dead leader's late write is
// refused, and rounds 2 and 3 play as scripted.
func TestReconcileLeaderKilledMidRound(t *testing.T) {
	rep := runScenario(t, true)
	checkScript(t, rep)
	if rep.Killed == "" || rep.Survivor == "" || rep.Killed == rep.Survivor {
		t.Fatalf("killed %q, survivor %q: want the other controller to take over", rep.Killed, rep.Survivor)
	}
	if !errors.Is(rep.LateWrite, client.ErrLocked) {
		t.Errorf("the dead leader's late write: %v, want ErrLocked", rep.LateWrite)
	}
	by := map[string]int{}
	for _, a := range rep.All {
		if a.Round == 1 && a.Err == nil {
			by[a.Controller]++
		}
	}
	if by[rep.Killed] == 0 || by[rep.Survivor] == 0 {
		t.Errorf("round 1 actions per controller %v: want both to have acted (the kill was mid-round)", by)
	}
}
