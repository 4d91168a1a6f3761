package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
)

func play(t *testing.T, env *exenv.Env, run Run) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Play(ctx, env, Config{Name: "test", Run: run, Seed: 1, Log: exenv.NewLog(exenv.TestWriter(t.Logf))})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Decisions {
		if d.Decision != "wait" && d.Canary.Requests < 200 {
			t.Errorf("decided %s at %d%% on %d canary requests; the rule needs 200", d.Decision, d.Stage, d.Canary.Requests)
		}
	}
	return res
}

// decisive is the decisions other than wait, as "stage:decision".
func decisive(res *Result) []string {
	var out []string
	for _, d := range res.Decisions {
		if d.Decision != "wait" {
			out = append(out, d.Decision+"@"+itoa(d.Stage))
		}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCanaryRuns is the scenario's claim, one subtest per run.
func TestCanaryRuns(t *testing.T) {
	_, env := proctest.Embedded(t, 60*time.Second)
	cases := []struct {
		run   Run
		want  []string
		final int
	}{
		{Healthy, []string{"proceed@5", "proceed@25", "proceed@50", "proceed@100"}, 100},
		{Faulty, []string{"rollback@5"}, 0}, // its first decisive stage
		{Outage, []string{"proceed@5", "proceed@25", "proceed@50", "proceed@100"}, 100},
	}
	for _, tc := range cases {
		t.Run(tc.run.String(), func(t *testing.T) {
			res := play(t, env, tc.run)
			got := decisive(res)
			if len(got) != len(tc.want) {
				t.Fatalf("decisions %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("decisions %v, want %v", got, tc.want)
				}
			}
			if res.Final != tc.final {
				t.Errorf("the flag ends at %d%%, want %d%%", res.Final, tc.final)
			}
			if tc.run == Outage { // the outage was real, and seen by both variants
				for _, d := range res.Decisions {
					if d.Stage == 25 && (pct(d.Baseline) < 20 || pct(d.Canary) < 20) {
						t.Errorf("at 25%% the error rates were %.1f%% and %.1f%%; the outage should show in both", pct(d.Baseline), pct(d.Canary))
					}
				}
			}
		})
	}
}
