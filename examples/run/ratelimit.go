package main

import (
	"fmt"
	"strings"
	"time"
)

// ratelimit starts a callers process against the three instances, kills
// one instance with kill -9 midway and starts it again on the same
// address, and shows the limit held across all three and the restart:
// the bucket is in the store, not in the instance.
func ratelimit(d *driver) error {
	const wait = time.Minute
	var urls []string
	for _, name := range []string{"A", "B", "C"} {
		_, l, err := d.wait(wait, name+" listening", 0, is("listening", name))
		if err != nil {
			return err
		}
		urls = append(urls, l.Get("url"))
	}
	d.say("starting the callers: 6 goroutines sending requests for one API key round-robin to A, B and C for 8s")
	if _, err := d.g.Start("callers", "--call", strings.Join(urls, ","), "--window", "8s", "--callers", "6"); err != nil {
		return err
	}
	i, _, err := d.wait(wait, "A, B and C answering", 0, is("served", "B"))
	if err != nil {
		return err
	}
	if _, _, err := d.wait(wait, "traffic", i+1, is("served", "B")); err != nil {
		return err
	}
	b := d.g.Instance("B")
	d.kill9(b, "its memory goes with it; the bucket, in the store, does not")
	if _, _, err := d.wait(wait, "traffic", d.g.Len(), is("served", "A")); err != nil {
		return err
	}
	d.say("starting B again on %s: an in-memory limiter would start it with a full bucket", urls[1])
	if _, err := d.g.Start("B", "--listen", strings.TrimPrefix(urls[1], "http://")); err != nil {
		return err
	}
	_, called, err := d.wait(wait, "the callers' tally", 0, is("called", "callers"))
	if err != nil {
		return err
	}
	d.say("%s requests allowed in %s, at most %s allowed by burst + rate × time: the limit %s (refused with 429: %s; connections refused while B was down: %s)",
		called.Get("allowed"), called.Get("elapsed"), called.Get("bound"), called.Get("limit"), called.Get("refused"), called.Get("other"))
	if called.Get("limit") != "held" {
		return fmt.Errorf("the shared limit was exceeded: %s", called.Line)
	}
	return nil
}
