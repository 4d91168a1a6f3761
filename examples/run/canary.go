package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// canary starts the proxy (routing by the flag) and a load generator in
// front of the baseline and canary instances; once the leading
// controller has made its first decision, switches on errors in the
// canary and kills that controller with kill -9. The other controller
// leads, goes on from the recorded stage and rolls the canary back; the
// decisions recorded in the store show each stage decided once.
func canary(d *driver) error {
	const wait = time.Minute
	urls := map[string]string{}
	for _, name := range []string{"baseline", "canary"} {
		_, l, err := d.wait(wait, name+" listening", 0, is("listening", name))
		if err != nil {
			return err
		}
		urls[name] = l.Get("url")
	}
	if _, err := d.g.Start("proxy", "--baseline", urls["baseline"], "--canary", urls["canary"]); err != nil {
		return err
	}
	_, l, err := d.wait(wait, "the proxy listening", 0, is("listening", "proxy"))
	if err != nil {
		return err
	}
	if _, err := d.g.Start("loadgen", "--target", l.Get("url"), "--rps", "1000"); err != nil {
		return err
	}
	_, first, err := d.wait(wait, "a first decision", 0, func(e exenv.Event) bool {
		return e.What == "decided" && e.Get("decision") != "wait"
	})
	if err != nil {
		return err
	}
	d.say("%s decided at %s%%: %s to %s%%; now the canary fails 5%% of its requests (%s = 0.05)",
		first.Instance, first.Get("at"), first.Get("decision"), first.Get("next"), "examples/canary/"+d.run+"/inject/canary")
	if _, err := d.client.Put(d.ctx, "examples/canary/"+d.run+"/inject/canary", []byte("0.05")); err != nil {
		return err
	}
	killedAt := d.g.Len()
	d.kill9(d.instance(first), "it leads the rollout: the other controller leads once its session expires, and goes on from the stage recorded")
	_, next, err := d.wait(wait, "the next leader's decision", killedAt, func(e exenv.Event) bool {
		return e.What == "decided" && e.Get("decision") != "wait" && e.Instance != first.Instance
	})
	if err != nil {
		return err
	}
	d.say("%s decided at %s%%: %s (canary %s errors, %s; baseline %s, %s)", next.Instance, next.Get("at"), next.Get("decision"),
		next.Get("canary"), next.Get("canary_rate"), next.Get("baseline"), next.Get("baseline_rate"))

	recs, err := recipe.Decisions(d.ctx, d.client, d.run)
	if err != nil {
		return err
	}
	var decisive []string
	stages := map[int]int{}
	for _, r := range recs {
		if r.Decision != "wait" {
			decisive = append(decisive, fmt.Sprintf("%s@%d%% (term %d)", r.Decision, r.Percent, r.Term))
			stages[r.Percent]++
		}
	}
	// The decision is recorded before the flag is set: wait, a bounded
	// while, for the flag to be set as decided.
	var f *recipe.Flag
	wctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	_ = exenv.WaitFor(wctx, func() (bool, error) {
		var err error
		f, err = recipe.GetFlag(wctx, d.client, "examples."+d.run)
		return err == nil && f.Rollout != nil && int(f.Rollout.Percent) == next.Int("next"), nil
	})
	if f == nil || f.Rollout == nil {
		return fmt.Errorf("no flag examples.%s with a rollout", d.run)
	}
	d.say("decisions recorded under dkv.canary/%s/decisions/: %s; the flag examples.%s serves the canary to %v%% of users",
		d.run, strings.Join(decisive, ", "), d.run, f.Rollout.Percent)
	var wrong []string
	for p, n := range stages {
		if n > 1 {
			wrong = append(wrong, fmt.Sprintf("the %d%% stage decided %d times", p, n))
		}
	}
	if next.Get("decision") != "rollback" {
		wrong = append(wrong, "the faulty canary was not rolled back: "+next.Line)
	}
	if f.Rollout.Percent != 0 && next.Get("decision") == "rollback" {
		wrong = append(wrong, fmt.Sprintf("rolled back, yet the flag is at %v%%", f.Rollout.Percent))
	}
	if len(wrong) > 0 {
		return fmt.Errorf("the rollout went wrong: %s", strings.Join(wrong, "; "))
	}
	d.say("the faulty canary was rolled back by the next leader, each stage decided once, across the kill of the leading controller")
	return nil
}
