package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// presence kills one of three nodes once each sees all three, and shows
// the others see it leave within its TTL; then restarts it, and it joins
// again.
func presence(d *driver) error {
	const wait = time.Minute
	nodes := []string{"node-1", "node-2", "node-3"}
	saw := func(watcher, change, member string) func(exenv.Event) bool {
		return func(e exenv.Event) bool {
			return e.Instance == watcher && e.What == change && e.Get("member") == member
		}
	}
	for _, w := range nodes {
		for _, n := range nodes {
			if _, _, err := d.wait(wait, w+" seeing "+n+" join", 0, saw(w, "join", n)); err != nil {
				return err
			}
		}
	}
	at := d.g.Len()
	start := time.Now()
	d.kill9(d.g.Instance("node-3"), "it deregisters nothing: its session's lease (TTL 3s) expires with nobody to keep it alive")
	for _, w := range nodes[:2] {
		if _, _, err := d.wait(wait, w+" seeing node-3 leave", at, saw(w, "leave", "node-3")); err != nil {
			return err
		}
	}
	d.say("node-1 and node-2 saw node-3 leave %.1fs after the kill (TTL 3s)", time.Since(start).Seconds())
	at = d.g.Len()
	d.say("starting node-3 again")
	if _, err := d.g.Start("node-3"); err != nil {
		return err
	}
	for _, w := range nodes[:2] {
		if _, _, err := d.wait(wait, w+" seeing node-3 join again", at, saw(w, "join", "node-3")); err != nil {
			return err
		}
	}
	group := "examples-presence-" + d.run
	ms, _, err := recipe.Members(d.ctx, d.client, group)
	if err != nil {
		return err
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	d.say("the group's members now: %s (what dkv --endpoints %s presence list %s shows)", strings.Join(ids, ", "), d.endpoints, group)
	if len(ms) != 3 {
		return fmt.Errorf("%d members, want 3", len(ms))
	}
	return nil
}
