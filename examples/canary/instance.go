package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// InstanceConfig is one process of the canary over real traffic. Its role
// is the instance name up to the first "-": baseline, canary, proxy,
// loadgen or controller ("controller-a" and "controller-b" are two
// controllers of which one leads).
type InstanceConfig struct {
	Name     string
	Rollout  string // the rollout: its flag is "examples.ROLLOUT", its keys under "examples/canary/ROLLOUT/"
	Listen   string // baseline, canary, proxy: the HTTP address to serve on
	Baseline string // proxy: the baseline's and the canary's base URLs
	Canary   string
	Target   string        // loadgen: the proxy's base URL
	RPS      int           // loadgen: requests per second
	Interval time.Duration // controller: between two decisions
	TTL      time.Duration // controller: its session's
	Ev       *exenv.Events // the process's event lines
}

func (cfg InstanceConfig) flagKey() string { return "examples." + cfg.Rollout }

// InjectKey holds the error rate (0 to 1) a variant's instances fail
// requests with: the fault switched on and off at run time.
func InjectKey(rollout, variant string) string {
	return "examples/canary/" + rollout + "/inject/" + variant
}

// RunInstance runs the instance until ctx ends (SIGTERM).
func RunInstance(ctx context.Context, c *client.Client, cfg InstanceConfig) error {
	role, _, _ := strings.Cut(cfg.Name, "-")
	switch role {
	case "baseline", "canary":
		return runVariant(ctx, c, cfg, role)
	case "proxy":
		return runProxy(ctx, c, cfg)
	case "loadgen":
		return runLoadgen(ctx, cfg)
	case "controller":
		return runController(ctx, c, cfg)
	}
	return fmt.Errorf("--instance %q: the name starts with baseline, canary, proxy, loadgen or controller", cfg.Name)
}

// serve serves h on cfg.Listen until ctx ends.
func serve(ctx context.Context, cfg InstanceConfig, h http.Handler) error {
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	cfg.Ev.Emit("listening", "url", "http://"+l.Addr().String())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	cfg.Ev.Emit("stopped")
	return nil
}

// watchRate keeps the error rate (0 to 1) under key, logging changes,
// until ctx ends.
func watchRate(ctx context.Context, c *client.Client, cfg InstanceConfig, key, what string) (*atomic.Uint64, error) {
	var rate atomic.Uint64 // float64 bits
	set := func(v []byte) {
		r, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
		if v == nil || err != nil || r < 0 || r > 1 {
			r = 0
		}
		if old := math.Float64frombits(rate.Swap(math.Float64bits(r))); old != r {
			cfg.Ev.Emit("failing", "percent", fmt.Sprintf("%.1f", 100*r), "where", what, "key", key)
		}
	}
	w, err := c.WatchKey(ctx, key, client.WithInitialSnapshot())
	if err != nil {
		return nil, err
	}
	if init := w.Initial(); init != nil && len(init.KVs) > 0 {
		set(init.KVs[0].Value)
	}
	go func() {
		defer w.Stop()
		for b := range w.Events() {
			for _, e := range b.Events {
				if e.Type == client.EventDelete {
					set(nil)
				} else {
					set(e.KV.Value)
				}
			}
		}
	}()
	return &rate, nil
}

func fail(rate *atomic.Uint64) bool { return rand.Float64() < math.Float64frombits(rate.Load()) }

// runVariant is a baseline or canary instance: it answers /checkout, and
// fails each request with the error rate under InjectKey(variant).
func runVariant(ctx context.Context, c *client.Client, cfg InstanceConfig, variant string) error {
	rate, err := watchRate(ctx, c, cfg, InjectKey(cfg.Rollout, variant), "in "+variant)
	if err != nil {
		return err
	}
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if fail(rate) {
			http.Error(rw, variant+": injected error", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(rw, "%s: checked out\n", variant)
	})
	return serve(ctx, cfg, h)
}

// runProxy routes each request to the baseline or the canary by the
// flag's sticky rollout (the user is the targeting key), and reports what
// each variant answered to the controller's counters, every 250ms. A
// request also fails at the rate under InjectKey("dependency"): a
// dependency both variants share (a database) failing, switched on and
// off for both at once.
func runProxy(ctx context.Context, c *client.Client, cfg InstanceConfig) error {
	outage, err := watchRate(ctx, c, cfg, InjectKey(cfg.Rollout, "dependency"), "in the shared dependency")
	if err != nil {
		return err
	}
	flags, err := recipe.NewFlags(ctx, c)
	if err != nil {
		return err
	}
	defer flags.Close()
	var mu sync.Mutex
	var counts [2]recipe.VariantStats // baseline, canary
	flush := func(ctx context.Context) error {
		mu.Lock()
		cs := counts
		counts = [2]recipe.VariantStats{}
		mu.Unlock()
		for i, v := range []string{"baseline", "canary"} {
			if err := recipe.ReportCanaryCounts(ctx, c, cfg.Rollout, v, cs[i].Requests, cs[i].Errors); err != nil {
				return err
			}
		}
		return nil
	}
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := flush(ctx); err != nil && ctx.Err() == nil {
					cfg.Ev.Emit("report-failed", "err", err)
				}
			}
		}
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		user := r.URL.Query().Get("user")
		canary := flags.Bool(cfg.flagKey(), "user-"+user, nil, false)
		target, i := cfg.Baseline, 0
		if canary {
			target, i = cfg.Canary, 1
		}
		status := http.StatusBadGateway
		resp, err := hc.Get(target + "/checkout?user=" + user)
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		if status < 500 && fail(outage) {
			status = http.StatusServiceUnavailable
		}
		mu.Lock()
		counts[i].Requests++
		if status >= 500 {
			counts[i].Errors++
		}
		mu.Unlock()
		rw.WriteHeader(status)
	})
	err = serve(ctx, cfg, h)
	// What was served before SIGTERM still counts.
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ferr := flush(fctx); err == nil {
		err = ferr
	}
	return err
}

// runLoadgen sends GET /checkout to the proxy for users in turn, at
// cfg.RPS, and logs the totals every 2s.
func runLoadgen(ctx context.Context, cfg InstanceConfig) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	var sent, failed atomic.Int64
	tick := time.NewTicker(time.Second / time.Duration(max(cfg.RPS, 1)))
	defer tick.Stop()
	report := time.NewTicker(2 * time.Second)
	defer report.Stop()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for u := range jobs {
				resp, err := hc.Get(fmt.Sprintf("%s/checkout?user=%d", cfg.Target, u))
				sent.Add(1)
				if err != nil || resp.StatusCode >= 500 {
					failed.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	defer wg.Wait()
	defer close(jobs)
	cfg.Ev.Emit("sending", "rps", cfg.RPS, "to", cfg.Target)
	user := 0
	for {
		select {
		case <-ctx.Done():
			cfg.Ev.Emit("stopped", "sent", sent.Load(), "failed", failed.Load())
			return nil
		case <-report.C:
			cfg.Ev.Emit("sent", "requests", sent.Load(), "failed", failed.Load())
		case <-tick.C:
			user = (user + 7919) % users
			select {
			case jobs <- user:
			default: // the workers are behind: skip a beat rather than queue
			}
		}
	}
}

// runController campaigns; as leader it creates the flag at the first
// stage if it does not exist, then decides every cfg.Interval
// (CanaryController.Step, every write fenced) until the rollout is
// finished. Losing the leadership, it campaigns again, with a new
// session if it lost its own (frozen or cut off longer than the TTL); the
// next leader goes on from the stage recorded in the store.
func runController(ctx context.Context, c *client.Client, cfg InstanceConfig) error {
	setPercent := func(ctx context.Context, p int, fence client.LockHandle) error {
		_, err := recipe.SetRollout(ctx, c, cfg.flagKey(), float64(p), client.WithLock(fence))
		return err
	}
	cc := recipe.NewCanaryController(c, cfg.Rollout, nil, recipe.CanaryThresholds{}, setPercent).WithStageWindows()
	for {
		err := controllerSession(ctx, c, cfg, cc)
		if ctx.Err() != nil {
			cfg.Ev.Emit("resigned", "session", "revoked")
			return nil
		}
		if !errors.Is(err, client.ErrLeaseExpired) && !errors.Is(err, client.ErrLeaseNotFound) {
			return err
		}
		cfg.Ev.Emit("lost-session", "err", err, "then", "campaigning again with a new one")
	}
}

// controllerSession campaigns and leads on one session until ctx ends or
// the session is lost.
func controllerSession(ctx context.Context, c *client.Client, cfg InstanceConfig, cc *recipe.CanaryController) error {
	s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(cfg.TTL))
	if err != nil {
		return err
	}
	defer s.Close()
	e := concurrency.NewElection(s, "examples/canary/"+cfg.Rollout+"/leader")
	cfg.Ev.Emit("campaigning", "rollout", cfg.Rollout)
	for {
		l, err := e.Campaign(ctx, nil)
		if err != nil {
			select {
			case <-s.Done():
				return s.Err()
			default:
			}
			return err
		}
		cfg.Ev.Emit("leader", "term", l.Term())
		err = lead(ctx, c, cfg, cc, l)
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.Resign(rctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !errors.Is(err, client.ErrLocked) {
			return err
		}
		cfg.Ev.Emit("lost-leadership", "err", err)
		select {
		case <-s.Done():
			return s.Err()
		default:
		}
	}
}

func lead(ctx context.Context, c *client.Client, cfg InstanceConfig, cc *recipe.CanaryController, l *concurrency.Leadership) error {
	_, err := recipe.GetFlag(ctx, c, cfg.flagKey())
	if errors.Is(err, client.ErrNotFound) {
		first := float64(recipe.DefaultCanaryStages[0])
		_, err = recipe.SetFlag(ctx, c, &recipe.Flag{
			Key: cfg.flagKey(), Type: recipe.FlagBool, Enabled: true,
			Variants:       map[string]json.RawMessage{"new": json.RawMessage("true"), "old": json.RawMessage("false")},
			DefaultVariant: "old", OffVariant: "old",
			Rollout: &recipe.FlagRollout{Variant: "new", Percent: first},
		}, client.WithLock(l.Handle()), client.IfAbsent())
		if err == nil {
			cfg.Ev.Emit("flag-created", "flag", cfg.flagKey(), "percent", first)
		}
	}
	if err != nil {
		return err
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.Done():
			return client.ErrLocked
		case <-t.C:
		}
		rec, err := cc.Step(ctx, l)
		if errors.Is(err, recipe.ErrRolloutFinished) {
			cfg.Ev.Emit("finished", "then", "waiting")
			select {
			case <-ctx.Done():
				return nil
			case <-l.Done():
				return client.ErrLocked
			}
		}
		if err != nil {
			return err
		}
		if rec.Decision != "wait" {
			cfg.Ev.Emit("decided", "at", rec.Percent, "decision", rec.Decision, "next", rec.Next, "term", rec.Term,
				"canary", fmt.Sprintf("%d/%d", rec.Canary.Errors, rec.Canary.Requests), "canary_rate", fmt.Sprintf("%.2f%%", pct(rec.Canary)),
				"baseline", fmt.Sprintf("%d/%d", rec.Baseline.Errors, rec.Baseline.Requests), "baseline_rate", fmt.Sprintf("%.2f%%", pct(rec.Baseline)))
		}
	}
}
