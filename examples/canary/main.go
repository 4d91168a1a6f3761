// Command canary rolls a new checkout out behind a feature flag in stages
// of 5, 25, 50 and 100% of users, deciding at each stage by the canary
// rule: at least 200 canary requests, and roll back when the canary's
// error rate is at least twice the baseline's and at least 0.5
// percentage points above it.
//
// Without --instance it plays three runs in one process, on simulated
// traffic: a healthy canary reaches 100%; a faulty one is rolled back at
// its first decisive stage; an outage that hits both variants does not
// blame the canary.
//
// With --instance NAME it is one process of the same over real HTTP
// traffic, against --endpoints: baseline, canary, proxy, loadgen or
// controller-X. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	var cfg InstanceConfig
	flag.StringVar(&cfg.Name, "instance", "", "run one process: `NAME` is baseline, canary, proxy, loadgen or controller-X")
	flag.StringVar(&cfg.Rollout, "rollout", "checkout", "the rollout's `name`: its flag is examples.NAME")
	run := flag.String("run", "", "with --instance: the run's `id`, the rollout's name unless --rollout is given")
	flag.StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "baseline, canary, proxy: the HTTP `address` to serve on")
	flag.StringVar(&cfg.Baseline, "baseline", "", "proxy: the baseline's base `URL`")
	flag.StringVar(&cfg.Canary, "canary", "", "proxy: the canary's base `URL`")
	flag.StringVar(&cfg.Target, "target", "", "loadgen: the proxy's base `URL`")
	flag.IntVar(&cfg.RPS, "rps", 1000, "loadgen: requests per second")
	flag.DurationVar(&cfg.Interval, "interval", 500*time.Millisecond, "controller: time between two decisions")
	flag.DurationVar(&cfg.TTL, "ttl", 2*time.Second, "controller: session TTL")
	exenv.ParseFlags()
	if cfg.Name == "" {
		exenv.Main(func(ctx context.Context, env *exenv.Env) error {
			log := exenv.NewLog(os.Stdout)
			for _, run := range []Run{Healthy, Faulty, Outage} {
				if _, err := Play(ctx, env, Config{Name: "checkout-" + env.Run, Run: run, Seed: 1, Log: log}); err != nil {
					return err
				}
			}
			return nil
		})
		return
	}
	rolloutSet := false
	flag.Visit(func(f *flag.Flag) { rolloutSet = rolloutSet || f.Name == "rollout" })
	if *run != "" && !rolloutSet {
		cfg.Rollout = *run
	}
	conn := exenv.Connection()
	if conn.Endpoints == "" && !strings.HasPrefix(cfg.Name, "loadgen") {
		fmt.Fprintln(os.Stderr, "--instance needs --endpoints: the processes share a cluster")
		os.Exit(2)
	}
	// SIGTERM and Ctrl-C end the process cleanly: a controller resigns
	// and revokes its session, a proxy reports its last counts.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Ev = exenv.NewEvents(os.Stdout, cfg.Name, os.Getpid())
	var err error
	if strings.HasPrefix(cfg.Name, "loadgen") {
		err = runLoadgen(ctx, cfg)
	} else {
		var env *exenv.Env
		if env, err = conn.Open(ctx); err == nil {
			err = RunInstance(ctx, env.Client, cfg)
			env.Close()
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
