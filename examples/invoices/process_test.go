package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestProcessWorkerKilledAndFrozenHoldingLocks runs three workers as
// processes of their own against three `dkv serve` processes: 12
// invoices, a 3 s lock TTL, a second of work per invoice. A worker that
// holds an invoice's lock is killed with SIGKILL; another that holds one
// is frozen with SIGSTOP until the third worker has paid that invoice,
// then thawed: its late write is refused with Locked. Every invoice ends
// paid, each by exactly one accepted write (its key written twice: open,
// then paid), and the workers left stop cleanly on SIGTERM.
func TestProcessWorkerKilledAndFrozenHoldingLocks(t *testing.T) {
	proctest.Skip(t)
	bin := proctest.Example(t, "invoices")
	_, cl, eps := proctest.Cluster(t)
	const n = 12
	run := fmt.Sprintf("t%d", time.Now().UnixNano())
	prefix := "examples/invoices/" + run + "/"
	g := proctest.Start(t, bin, []string{"--endpoints", eps, "--run", run, "--invoices", fmt.Sprint(n),
		"--lock-ttl", "3s", "--work", "1s"}, "w1", "w2", "w3")
	const wait = 60 * time.Second
	i, _ := proctest.Wait(t, g, wait, "an invoice paid", 0, proctest.Is("paid", ""))

	// Kill a worker while it holds a lock: the invoice waits for the
	// lock's TTL, then another worker pays it.
	_, held := proctest.Wait(t, g, wait, "a worker locking an invoice", i+1, proctest.Is("locked", ""))
	killed := g.Instance(held.Instance)
	t.Logf("kill -9 %s, holding invoice %d", killed, held.Int("invoice"))
	killed.Kill()

	// Freeze another while it holds a lock, until the last one has paid
	// that invoice.
	_, held = proctest.Wait(t, g, wait, "another worker locking an invoice", g.Len(), proctest.Is("locked", ""))
	frozen, inv := g.Instance(held.Instance), held.Int("invoice")
	t.Logf("SIGSTOP %s, holding invoice %d (token %d)", frozen, inv, held.Int("token"))
	if err := frozen.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			frozen.Thaw()
		}
	}()
	// The invoice is paid by the last worker after the lock's TTL,
	// unless the frozen one's write landed before the freeze took hold.
	var paid *client.KeyValue
	testutil.EventuallyNoError(t, wait, fmt.Sprintf("invoice %d paid while %s is frozen", inv, frozen), func(ctx context.Context) error {
		kv, err := cl.Get(ctx, invoiceKey(prefix, inv))
		if err == nil && string(kv.Value) == "open" {
			err = fmt.Errorf("invoice %d is still open", inv)
		}
		paid = kv
		return err
	})
	thawAt := g.Len()
	t.Logf("SIGCONT %s (invoice %d is %q)", frozen, inv, paid.Value)
	if err := frozen.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	_, late := proctest.Wait(t, g, wait, frozen.String()+"'s result for invoice "+fmt.Sprint(inv), thawAt, func(e exenv.Event) bool {
		return e.Instance == frozen.Name && e.Int("invoice") == inv && (e.What == "paid" || e.What == "refused")
	})
	switch {
	case late.What == "refused" && strings.Contains(late.Get("err"), "locked"):
	case late.What == "paid" && string(paid.Value) == "paid by "+frozen.Name:
		t.Logf("%s's write landed before the freeze took hold: nothing late to refuse", frozen)
	default:
		t.Errorf("the frozen worker's late write: %s; want it refused with Locked (invoice %d was %q)", late.Line, inv, paid.Value)
	}

	// Every invoice ends paid, each by one write.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	testutil.EventuallyNoError(t, wait, "every invoice paid", func(ctx context.Context) error {
		r, err := cl.List(ctx, prefix+"invoice/")
		if err != nil {
			return err
		}
		for _, kv := range r.KVs {
			if string(kv.Value) == "open" {
				return fmt.Errorf("%s is open", kv.Key)
			}
		}
		return nil
	})
	proctest.StopAll(t, g)
	if r, err := cl.List(ctx, prefix+"invoice/"); err != nil {
		t.Fatal(err)
	} else if len(r.KVs) != n {
		t.Errorf("%d invoices in the store, want %d", len(r.KVs), n)
	} else {
		for _, kv := range r.KVs {
			if kv.Version != 2 || !strings.HasPrefix(string(kv.Value), "paid by ") {
				t.Errorf("%s: %q after %d writes; want paid by one accepted write after the open one", kv.Key, kv.Value, kv.Version)
			}
		}
	}
	payments := map[int][]string{}
	for _, e := range g.Events() {
		if e.What == "paid" {
			payments[e.Int("invoice")] = append(payments[e.Int("invoice")], e.Line)
		}
	}
	for i, lines := range payments {
		if len(lines) > 1 {
			t.Errorf("invoice %d paid %d times:\n  %s", i, len(lines), strings.Join(lines, "\n  "))
		}
	}
}
