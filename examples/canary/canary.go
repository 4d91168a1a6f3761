package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// Run is one of the three runs.
type Run int

const (
	Healthy Run = iota // the canary fails no more than the baseline
	Faulty             // the canary fails 5% of its requests
	Outage             // during the 25% stage a dependency fails a quarter of all requests, both variants alike
)

func (r Run) String() string {
	return [...]string{"healthy canary", "faulty canary", "outage during the 25% stage"}[r]
}

// Config is one run.
type Config struct {
	Name string // the rollout's name: the controller's keys derive from it
	Run  Run
	Seed uint64 // the simulated traffic's random errors
	Log  *exenv.Log
}

// Decision is one stage decision, as the controller recorded it.
type Decision struct {
	Stage, Next      int // the stage decided on, the percentage set after it
	Decision         string
	Baseline, Canary recipe.VariantStats
}

// Result is how the run ended.
type Result struct {
	Decisions []Decision
	Final     int // the flag's rollout percentage at the end
}

const (
	requestsPerTick = 1000  // requests served between two decisions
	users           = 50000 // distinct users sending them
)

// errorRate is the chance that a request fails.
func (cfg Config) errorRate(canary bool, stage int) float64 {
	rate := 0.005 // the baseline's usual 0.5%
	switch {
	case cfg.Run == Faulty && canary:
		rate = 0.05
	case canary:
		rate = 0.003 // healthy: the new checkout fails a little less
	}
	if cfg.Run == Outage && stage == 25 {
		rate += 0.25
	}
	return rate
}

// Play runs one rollout to its end and returns the decisions made.
func Play(ctx context.Context, env *exenv.Env, cfg Config) (*Result, error) {
	log, c := cfg.Log, env.Client
	log.Say("\n=== %s ===", cfg.Run)
	// The flag's name fixes which users get the new checkout (sticky
	// buckets hash it), so it is the same in every run of the program.
	flagKey := fmt.Sprintf("examples.checkout-%d", int(cfg.Run))
	name := fmt.Sprintf("%s-%d", cfg.Name, int(cfg.Run))
	rev, err := recipe.SetFlag(ctx, c, &recipe.Flag{
		Key: flagKey, Type: recipe.FlagBool, Enabled: true,
		Variants:       map[string]json.RawMessage{"new": json.RawMessage("true"), "old": json.RawMessage("false")},
		DefaultVariant: "old", OffVariant: "old",
		Rollout: &recipe.FlagRollout{Variant: "new", Percent: float64(recipe.DefaultCanaryStages[0])},
	})
	if err != nil {
		return nil, err
	}
	flags, err := recipe.NewFlags(ctx, c) // what every instance evaluates locally
	if err != nil {
		return nil, err
	}
	defer flags.Close()
	var mu sync.Mutex
	var lastRev int64 = rev
	setPercent := func(ctx context.Context, p int, fence client.LockHandle) error {
		rev, err := recipe.SetRollout(ctx, c, flagKey, float64(p), client.WithLock(fence))
		mu.Lock()
		lastRev = max(lastRev, rev)
		mu.Unlock()
		return err
	}
	cc := recipe.NewCanaryController(c, name, nil, recipe.CanaryThresholds{}, setPercent).WithStageWindows()
	s, err := concurrency.NewSession(ctx, c)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	l, err := concurrency.NewElection(s, "examples/canary/"+name+"/leader").Campaign(ctx, nil)
	if err != nil {
		return nil, err
	}
	log.Printf("flag %s serves the new checkout to %d%% of users", flagKey, recipe.DefaultCanaryStages[0])
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Run)))
	res := &Result{}
	user := 0
	for {
		mu.Lock()
		want := lastRev
		mu.Unlock()
		if err := flags.WaitForRevision(ctx, want); err != nil { // serve with the flag as last set
			return nil, err
		}
		f, err := recipe.GetFlag(ctx, c, flagKey)
		if err != nil {
			return nil, err
		}
		stage := int(f.Rollout.Percent)
		var counts [2]recipe.VariantStats // baseline, canary
		for range requestsPerTick {
			user = (user + 7919) % users // the next user to send a request
			canary := flags.Bool(flagKey, fmt.Sprintf("user-%d", user), nil, false)
			v := &counts[0]
			if canary {
				v = &counts[1]
			}
			v.Requests++
			if rng.Float64() < cfg.errorRate(canary, stage) {
				v.Errors++
			}
		}
		for i, variant := range []string{"baseline", "canary"} {
			if err := recipe.ReportCanaryCounts(ctx, c, name, variant, counts[i].Requests, counts[i].Errors); err != nil {
				return nil, err
			}
		}
		rec, err := cc.Step(ctx, l)
		if err != nil {
			return nil, err
		}
		d := Decision{Stage: rec.Percent, Next: rec.Next, Decision: rec.Decision, Baseline: rec.Baseline, Canary: rec.Canary}
		res.Decisions = append(res.Decisions, d)
		log.Printf("at %3d%%: canary %4d requests, %3d errors (%5.2f%%); baseline %4d, %3d (%5.2f%%) -> %s%s",
			d.Stage, d.Canary.Requests, d.Canary.Errors, pct(d.Canary), d.Baseline.Requests, d.Baseline.Errors, pct(d.Baseline),
			d.Decision, then(d))
		if d.Decision == "rollback" || d.Decision == "proceed" && d.Stage == 100 {
			break
		}
	}
	f, err := recipe.GetFlag(ctx, c, flagKey)
	if err != nil {
		return nil, err
	}
	res.Final = int(f.Rollout.Percent)
	log.Printf("done: the flag serves the new checkout to %d%% of users", res.Final)
	return res, nil
}

func then(d Decision) string {
	switch {
	case d.Decision == "rollback":
		return ", the flag goes back to 0%"
	case d.Decision == "proceed" && d.Stage < 100:
		return fmt.Sprintf(" to %d%%", d.Next)
	case d.Decision == "wait":
		return " (fewer than 200 canary requests)"
	}
	return ""
}

func pct(v recipe.VariantStats) float64 {
	if v.Requests == 0 {
		return 0
	}
	return 100 * float64(v.Errors) / float64(v.Requests)
}
