// Command reconcile runs a level-triggered reconcile loop on the elected
// leader of two controllers, driven by watches of the desired and the
// actual state, and plays a fixed script: round 1 stops alt-1,
// updates web-1 and starts web-3; round 2 does nothing; after web-2
// crashes, round 3 starts it again. In round 1 the leading controller is
// killed mid-round: the other takes over and finishes the round without
// repeating an action. See README.md.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	kill := flag.Bool("kill", true, "kill the leading controller in the middle of round 1")
	exenv.Main(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix: "examples/reconcile/" + env.Run + "/", TTL: 2 * time.Second, Kill: *kill,
			Log: exenv.NewLog(os.Stdout),
		})
		return err
	})
}
