package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// scheduledJob kills the leader with SIGKILL, then freezes the next one
// with SIGSTOP until a third has taken over, thaws it, and shows its late
// write refused and the store holding one run per period.
func scheduledJob(d *driver) error {
	const wait = time.Minute
	_, lead, err := d.wait(wait, "a leader", 0, is("leader", ""))
	if err != nil {
		return err
	}
	i, _, err := d.wait(wait, "a run", 0, is("ran", lead.Instance))
	if err != nil {
		return err
	}
	if _, _, err := d.wait(wait, "a second run", i+1, is("ran", lead.Instance)); err != nil {
		return err
	}

	killed := d.g.Len()
	at := time.Now()
	d.kill9(d.instance(lead), "it is the leader: its lease expires after the TTL, with nobody to revoke it")
	i, next, err := d.wait(wait, "a new leader", killed, is("leader", ""))
	if err != nil {
		return err
	}
	d.say("%s leads %.1fs after the kill; it runs every period since the last one recorded", next.Instance, time.Since(at).Seconds())
	if i, _, err = d.wait(wait, "a run", i, is("ran", next.Instance)); err != nil {
		return err
	}
	_, last, err := d.wait(wait, "a second run", i+1, is("ran", next.Instance))
	if err != nil {
		return err
	}

	frozen := d.instance(next)
	froze := d.g.Len()
	at = time.Now()
	if err := d.freeze(frozen, "it is the leader: frozen, it sends no keep-alives, and knows nothing"); err != nil {
		return err
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = frozen.Thaw()
		}
	}()
	pending := last.Int("period") + 1
	i, third, err := d.wait(wait, "a leader while "+frozen.String()+" is frozen", froze, is("leader", ""))
	if err != nil {
		return err
	}
	d.say("%s leads %.1fs after the freeze", third.Instance, time.Since(at).Seconds())
	if _, _, err := d.wait(wait, "a run past the frozen leader's", i, func(e exenv.Event) bool {
		return e.What == "ran" && e.Instance == third.Instance && e.Int("period") > pending
	}); err != nil {
		return err
	}
	thawAt := d.g.Len()
	if err := d.thaw(frozen, fmt.Sprintf("it wakes believing it leads with term %d, and writes the period it was waiting for", next.Int("term"))); err != nil {
		return err
	}
	thawed = true
	_, late, err := d.wait(wait, frozen.String()+"'s late write", thawAt, func(e exenv.Event) bool {
		return e.Instance == frozen.Name && (e.What == "refused" || e.What == "deposed" || e.What == "ran" && e.Int("period") > pending)
	})
	if err != nil {
		return err
	}
	if late.What == "ran" {
		d.say("%s's late write was ACCEPTED: the job ran twice", frozen)
	} else {
		d.say("the store refused %s's late write: its term %s is no longer current", frozen, late.Get("term"))
	}
	i, _, err = d.wait(wait, "a run", d.g.Len(), is("ran", third.Instance))
	if err != nil {
		return err
	}
	if _, _, err := d.wait(wait, "a run", i+1, is("ran", third.Instance)); err != nil {
		return err
	}

	prefix := "examples/scheduled-job/" + d.run + "/runs/"
	r, err := d.client.List(d.ctx, prefix)
	if err != nil {
		return err
	}
	var twice, gaps []string
	var prev int64
	for _, kv := range r.KVs {
		p, _ := strconv.ParseInt(strings.TrimPrefix(kv.Key, prefix), 10, 64)
		if kv.Version != 1 {
			twice = append(twice, fmt.Sprint(p))
		}
		if prev != 0 && p != prev+1 {
			gaps = append(gaps, fmt.Sprintf("%d-%d", prev+1, p-1))
		}
		prev = p
	}
	d.say("the store holds %d periods' runs (%s): written twice: %d, missed: %d", len(r.KVs), prefix, len(twice), len(gaps))
	if len(twice)+len(gaps) > 0 {
		return fmt.Errorf("periods run twice: %v; missed: %v", twice, gaps)
	}
	return nil
}
