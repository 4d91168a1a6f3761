package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// react has three consumers follow the changes the driver makes, kills
// one with kill -9 in the middle of the stream and starts it again while
// the changes go on, and shows from the records in the store that each
// consumer handled every change once: none missed, none twice.
func react(d *driver) error {
	const wait = time.Minute
	p := "examples/react/" + d.run + "/"
	names := []string{"r1", "r2", "r3"}
	for _, n := range names {
		if _, _, err := d.wait(wait, n+"'s first sync", 0, is("synced", n)); err != nil {
			return err
		}
	}
	const changes = 60
	d.say("making %d changes under %sdata/, one every 50ms; r2 is killed with kill -9 after the 20th and started again after the 40th", changes, p)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var revs []int64
	for i := range changes {
		select {
		case <-tick.C:
		case <-d.ctx.Done():
			return d.ctx.Err()
		}
		r, err := d.client.Put(d.ctx, fmt.Sprintf("%sdata/k%02d", p, i%10), []byte(fmt.Sprint(i)))
		if err != nil {
			return err
		}
		revs = append(revs, r.Revision)
		switch i {
		case 19:
			d.kill9(d.g.Instance("r2"), "it is handling the stream; its checkpoint is in the store")
		case 39:
			d.say("starting r2 again: it resumes from its checkpoint + 1")
			if _, err := d.g.Start("r2"); err != nil {
				return err
			}
		}
	}
	last := revs[len(revs)-1]
	var wrong []string
	for _, n := range names {
		ck := p + "consumers/" + n
		wctx, cancel := context.WithTimeout(d.ctx, wait)
		err := exenv.WaitFor(wctx, func() (bool, error) {
			kv, err := d.client.Get(wctx, ck)
			return err == nil && string(kv.Value) == fmt.Sprint(last), nil
		})
		cancel()
		if err != nil {
			return fmt.Errorf("%s's checkpoint did not reach %d within %v", n, last, wait)
		}
		r, err := d.client.List(d.ctx, p+"handled/"+n+"/")
		if err != nil {
			return err
		}
		version := map[string]int64{}
		for _, kv := range r.KVs {
			version[strings.TrimPrefix(kv.Key, p+"handled/"+n+"/")] = kv.Version
		}
		var missed, twice int
		for _, rev := range revs {
			switch v := version[fmt.Sprintf("%d-0", rev)]; {
			case v == 0:
				missed++
			case v > 1:
				twice++
			}
		}
		d.say("%s handled the %d changes: missed %d, twice %d (records under %shandled/%s/)", n, changes, missed, twice, p, n)
		if missed+twice > 0 {
			wrong = append(wrong, fmt.Sprintf("%s missed %d and handled %d twice", n, missed, twice))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%s", strings.Join(wrong, "; "))
	}
	d.say("every consumer handled every change once, r2 across its kill -9 and restart")
	return nil
}
