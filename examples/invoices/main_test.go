package main

import (
	"errors"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
)

// TestPausedWorkerRefused is the scenario's claim: a worker pauses on an
// invoice past its lock's TTL; another worker processes that invoice, the
// paused worker's late write is refused with Locked, and every invoice
// has exactly one accepted result.
func TestPausedWorkerRefused(t *testing.T) {
	ctx, env := proctest.Embedded(t, 60*time.Second)
	const n = 12
	rep, err := Run(ctx, env, Config{
		Prefix: "inv/", Invoices: n, Workers: 3, LockTTL: time.Second, Work: 10 * time.Millisecond,
		PauseOn: 2, Log: exenv.NewLog(exenv.TestWriter(t.Logf)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if rep.Accepted[i] != 1 || rep.PaidBy[i] == "" || rep.PaidBy[i] == "open" {
			t.Errorf("invoice %d: %q, %d results accepted; want processed exactly once", i, rep.PaidBy[i], rep.Accepted[i])
		}
	}
	if rep.Paused == "" || rep.TakenBy == "" || rep.TakenBy == rep.Paused {
		t.Fatalf("paused %q, invoice 2 processed by %q: want another worker to take it over", rep.Paused, rep.TakenBy)
	}
	if !errors.Is(rep.LateWrite, client.ErrLocked) {
		t.Errorf("the paused worker's late write: %v, want ErrLocked", rep.LateWrite)
	}
}

// TestSeedSkipsLockedInvoices: an instance that starts after another has
// seeded and locked an invoice seeds the rest and does not fail on the
// locked one (the CI run of 2026-12-07 15:13 lost a worker that way).
func TestSeedSkipsLockedInvoices(t *testing.T) {
	ctx, env := proctest.Embedded(t, 60*time.Second)
	if n, err := seed(ctx, env.Client, "inv/", 3); err != nil || n != 3 {
		t.Fatalf("first seed: %d created, %v; want 3", n, err)
	}
	res, err := env.Client.TryAcquire(ctx, invoiceKey("inv/", 2), 10*time.Second)
	if err != nil || !res.Acquired {
		t.Fatalf("locking invoice 2: %+v, %v", res, err)
	}
	if n, err := seed(ctx, env.Client, "inv/", 4); err != nil || n != 1 {
		t.Fatalf("second seed with invoice 2 locked: %d created, %v; want 1 (invoice 4) and no error", n, err)
	}
}
