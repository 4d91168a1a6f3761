package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// invoices kills a worker that holds an invoice's lock, freezes another
// that holds one until the last worker has paid that invoice, thaws it
// to show its late write refused, and shows every invoice paid once.
func invoices(d *driver) error {
	const wait = time.Minute
	prefix := "examples/invoices/" + d.run + "/invoice/"
	i, _, err := d.wait(wait, "an invoice paid", 0, is("paid", ""))
	if err != nil {
		return err
	}
	_, held, err := d.wait(wait, "a worker locking an invoice", i+1, is("locked", ""))
	if err != nil {
		return err
	}
	d.kill9(d.instance(held), fmt.Sprintf("it holds invoice %d's lock: the lock expires after its TTL, with nobody to release it", held.Int("invoice")))

	_, held, err = d.wait(wait, "another worker locking an invoice", d.g.Len(), is("locked", ""))
	if err != nil {
		return err
	}
	frozen, inv := d.instance(held), held.Int("invoice")
	if err := d.freeze(frozen, fmt.Sprintf("it holds invoice %d's lock (token %d), and will write its result with it when it wakes", inv, held.Int("token"))); err != nil {
		return err
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = frozen.Thaw()
		}
	}()
	pi, paid, err := d.wait(wait, fmt.Sprintf("invoice %d paid by another worker", inv), 0, func(e exenv.Event) bool {
		return e.What == "paid" && e.Int("invoice") == inv && e.Instance != frozen.Name
	})
	if err != nil {
		return err
	}
	d.say("invoice %d was paid by %s once %s's lock expired", inv, paid.Instance, frozen)
	thawAt := d.g.Len()
	if err := d.thaw(frozen, "it wakes and writes its result with its expired lock"); err != nil {
		return err
	}
	thawed = true
	_, late, err := d.wait(wait, frozen.String()+"'s late result", thawAt, func(e exenv.Event) bool {
		return e.Instance == frozen.Name && e.Int("invoice") == inv && (e.What == "paid" || e.What == "refused")
	})
	if err != nil {
		return err
	}
	if late.What == "paid" {
		d.say("%s's late write was ACCEPTED: invoice %d was processed twice", frozen, inv)
	} else {
		d.say("the store refused %s's late write: its lock (token %s) is no longer current", frozen, late.Get("token"))
	}
	if _, _, err := d.wait(wait, "every invoice paid", pi, is("idle", "")); err != nil {
		return err
	}
	r, err := d.client.List(d.ctx, prefix)
	if err != nil {
		return err
	}
	var twice, open []string
	for _, kv := range r.KVs {
		name := strings.TrimPrefix(kv.Key, prefix)
		switch {
		case string(kv.Value) == "open":
			open = append(open, name)
		case kv.Version != 2:
			twice = append(twice, name)
		}
	}
	d.say("the store holds %d invoices (%s): open: %d, paid more than once: %d", len(r.KVs), prefix, len(open), len(twice))
	if len(open)+len(twice) > 0 {
		return fmt.Errorf("invoices open: %v; paid more than once: %v", open, twice)
	}
	return nil
}
