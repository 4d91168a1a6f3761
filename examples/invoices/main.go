// Command invoices has three workers process a batch of invoices so that
// each is processed by exactly one of them: a worker locks an invoice
// (a lock the store enforces, with a TTL) and writes the result with the
// lock's handle. One worker pauses mid-invoice past the lock's TTL;
// another takes the invoice over, and the paused worker's late write is
// refused with Locked. See README.md.
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
	exenv.Main(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix:   "examples/invoices/" + env.Run + "/",
			Invoices: *n, Workers: 3, LockTTL: 2 * time.Second,
			Work: 150 * time.Millisecond, PauseOn: 3,
			Log: exenv.NewLog(os.Stdout),
		})
		return err
	})
}
