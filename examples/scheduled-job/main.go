// Command scheduled-job runs a periodic job on three workers so that it
// runs once per period, not three times: the workers elect a leader, only
// the leader runs the job, and the job's result is written fenced by the
// leader's term. Midway the leader freezes (as under SIGSTOP) past its
// session's TTL: another worker takes over and the frozen one's late
// write, when it wakes, is refused. See README.md.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	periods := flag.Int("periods", 8, "how many periods to run")
	exenv.Main(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix:  "examples/scheduled-job/" + env.Run + "/",
			Workers: 3, Period: time.Second, TTL: 2 * time.Second,
			Periods: *periods, StallIn: 2,
			Log: exenv.NewLog(os.Stdout),
		})
		return err
	})
}
