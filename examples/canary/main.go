// Command canary rolls a new checkout out behind a feature flag in stages
// of 5, 25, 50 and 100% of users, deciding at each stage by the canary
// rule: at least 200 canary requests, and roll back when the canary's
// error rate is at least twice the baseline's and at least 0.5
// percentage points above it. It plays three runs: a healthy canary
// reaches 100%; a faulty one is rolled back at its first decisive stage;
// an outage that hits both variants does not blame the canary. See
// README.md.
package main

import (
	"context"
	"os"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	exenv.Main(func(ctx context.Context, env *exenv.Env) error {
		log := exenv.NewLog(os.Stdout)
		for _, run := range []Run{Healthy, Faulty, Outage} {
			if _, err := Play(ctx, env, Config{Name: "checkout-" + env.Run, Run: run, Seed: 1, Log: log}); err != nil {
				return err
			}
		}
		return nil
	})
}
