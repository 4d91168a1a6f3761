// Command scheduled-job runs a periodic job on three workers so that it
// runs once per period, not three times: the workers elect a leader, only
// the leader runs the job, and the job's result is written fenced by the
// leader's term.
//
// With no --instance it plays the whole scenario in one process: midway
// the leader freezes (as under SIGSTOP) past its session's TTL; another
// worker takes over and the frozen one's late write, when it wakes, is
// refused. With --instance NAME the process is one worker, for as long
// as it runs; start three, and kill -9 or SIGSTOP the leader to see the
// same with real processes (go run ./examples/run scheduled-job does it
// for you). See README.md.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	periods := flag.Int("periods", 8, "how many periods the narrated run lasts")
	period := flag.Duration("period", time.Second, "the job runs once per period")
	ttl := flag.Duration("ttl", 2*time.Second, "the workers' session TTL: how long a frozen or killed leader keeps the leadership")
	exenv.MainInstances(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix:  "examples/scheduled-job/" + env.Run + "/",
			Workers: 3, Period: *period, TTL: *ttl,
			Periods: *periods, StallIn: 2,
			Log: exenv.NewLog(os.Stdout),
		})
		return err
	}, func(ctx context.Context, in *exenv.Instance) error {
		w := &worker{name: in.Name, c: in.Client, prefix: "examples/scheduled-job/" + in.Run + "/",
			period: *period, ttl: *ttl, emit: in.Emit}
		return w.run(ctx)
	})
}
