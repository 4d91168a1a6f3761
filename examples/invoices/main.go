// Command invoices has three workers process a batch of invoices so that
// each is processed by exactly one of them: a worker locks an invoice
// (a lock the store enforces, with a TTL) and writes the result with the
// lock's handle.
//
// With no --instance it plays the whole scenario in one process: one
// worker pauses mid-invoice past the lock's TTL; another takes the
// invoice over, and the paused worker's late write is refused with
// Locked. With --instance NAME the process is one worker, until SIGTERM;
// start three, and kill -9 or SIGSTOP one that holds a lock to see the
// same with real processes (go run ./examples/run invoices does it for
// you). See README.md.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	n := flag.Int("invoices", 10, "how many invoices")
	lockTTL := flag.Duration("lock-ttl", 2*time.Second, "how long a worker holds an invoice's lock without renewing it")
	work := flag.Duration("work", 150*time.Millisecond, "how long processing one invoice takes")
	exenv.MainInstances(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix:   "examples/invoices/" + env.Run + "/",
			Invoices: *n, Workers: 3, LockTTL: *lockTTL,
			Work: *work, PauseOn: 3,
			Log: exenv.NewLog(os.Stdout),
		})
		return err
	}, func(ctx context.Context, in *exenv.Instance) error {
		return instance(ctx, in, *n, *lockTTL, *work)
	})
}
