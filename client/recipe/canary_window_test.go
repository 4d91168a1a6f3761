package recipe_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
)

// An outage that hits both variants alike during the 25% stage (25% of
// every request fails) rolls a healthy canary back when the counts are
// cumulative, because most of the canary's requests come from that stage;
// WithStageWindows compares the two variants over the stage alone and
// proceeds.
func TestCanaryControllerStageWindows(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	l, err := concurrency.NewElection(newSession(t, c), "ctl/canary").Campaign(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	noFlag := func(context.Context, int, client.LockHandle) error { return nil }
	run := func(name string, cc *recipe.CanaryController) []string {
		report := func(variant string, n, failed int64) {
			if err := recipe.ReportCanaryCounts(ctx, c, name, variant, n, failed); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		step := func() {
			rec, err := cc.Step(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, rec.Decision)
		}
		report("baseline", 3800, 19) // 5%: 0.5% errors both
		report("canary", 200, 1)
		step()
		report("baseline", 750, 190) // 25%, the outage: about 25% errors both
		report("canary", 250, 63)
		step()
		return got
	}
	cum := run("cumulative", recipe.NewCanaryController(c, "cumulative", nil, recipe.CanaryThresholds{}, noFlag))
	if cum[0] != "proceed" || cum[1] != "rollback" {
		t.Fatalf("cumulative counts decided %v; the test expects them to blame the canary", cum)
	}
	win := run("windowed", recipe.NewCanaryController(c, "windowed", nil, recipe.CanaryThresholds{}, noFlag).WithStageWindows())
	if win[0] != "proceed" || win[1] != "proceed" {
		t.Fatalf("stage windows decided %v, want [proceed proceed]", win)
	}
	recs, err := recipe.Decisions(ctx, c, "windowed")
	if err != nil {
		t.Fatal(err)
	}
	if got := recs[1].Canary; got != (recipe.VariantStats{Requests: 250, Errors: 63}) {
		t.Fatalf("second decision counted the canary as %+v, want the 25%% stage's 250/63", got)
	}
}

func TestReportCanaryCountsBadInput(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	for _, n := range [][2]int64{{-1, 0}, {1, 2}, {0, -1}} {
		if err := recipe.ReportCanaryCounts(ctx, c, "x", "canary", n[0], n[1]); !errors.Is(err, client.ErrInvalidInput) {
			t.Errorf("%d requests %d errors: %v, want ErrInvalidInput", n[0], n[1], err)
		}
	}
	if err := recipe.ReportCanaryCounts(ctx, c, "x", "other", 1, 0); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("variant other: %v, want ErrInvalidInput", err)
	}
}

// SetRollout WithLock is the fenced flag write a canary controller's
// setPercent makes: refused once the handle is no longer current.
func TestFlagSetRolloutFenced(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	if _, err := recipe.SetFlag(ctx, c, &recipe.Flag{
		Key: "k", Type: recipe.FlagBool, Enabled: true,
		Variants:       map[string]json.RawMessage{"on": json.RawMessage("true"), "off": json.RawMessage("false")},
		DefaultVariant: "off", OffVariant: "off", Rollout: &recipe.FlagRollout{Variant: "on", Percent: 5},
	}); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, c)
	l, err := concurrency.NewElection(s, "ctl/flag").Campaign(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recipe.SetRollout(ctx, c, "k", 25, client.WithLock(l.Handle())); err != nil {
		t.Fatal(err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := recipe.SetRollout(ctx, c, "k", 50, client.WithLock(l.Handle())); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("fenced SetRollout after resigning: %v, want ErrLocked", err)
	}
	f, err := recipe.GetFlag(ctx, c, "k")
	if err != nil {
		t.Fatal(err)
	}
	if f.Rollout.Percent != 25 {
		t.Fatalf("rollout at %v%%, want 25 (the refused write changed nothing)", f.Rollout.Percent)
	}
}
