// Command reconcile runs a level-triggered reconcile loop on the elected
// leader of its instances.
//
// Without --instance or --child it plays a fixed script in one process:
// round 1 stops alt-1, updates web-1 and starts web-3; round 2 does
// nothing; after web-2 crashes, round 3 starts it again. In round 1 the
// leading controller is killed mid-round: the other takes over and
// finishes the round without repeating an action.
//
// With --instance NAME it is one reconciler process against --endpoints,
// whose actual state is real child processes (this binary with --child)
// that it starts, stops and restarts. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	kill := flag.Bool("kill", true, "kill the leading controller in the middle of round 1 (the demo)")
	instance := flag.String("instance", "", "run one reconciler process named `NAME` against --endpoints, until SIGTERM")
	child := flag.String("child", "", "run as the child process `NAME` (started by a reconciler instance)")
	version := flag.String("version", "", "the child's version (--child)")
	intentRev := flag.Int64("intent-rev", 0, "the revision of the start the child takes over (--child)")
	prefix := flag.String("prefix", "examples/reconcile/proc/", "key prefix of --instance and --child")
	ttl := flag.Duration("ttl", 2*time.Second, "session TTL of --instance and --child")
	crashAfter := flag.Int("crash-after", 0, "fault injection: --instance kills itself (SIGKILL) right after its `N`th action")
	freezeBefore := flag.Int("freeze-before", 0, "fault injection: --instance stops itself (SIGSTOP) right before its `N`th action's write, which it sends late once continued")
	startDelay := flag.Duration("start-delay", 0, "how long children take to come up (--instance: its children's; --child: its own)")
	run := flag.String("run", "", "the run's `id`: --instance and --child then keep their keys under examples/reconcile/ID/ unless --prefix is given")
	exenv.ParseFlags()
	if *instance == "" && *child == "" {
		exenv.Main(func(ctx context.Context, env *exenv.Env) error {
			_, err := Run(ctx, env, Config{
				Prefix: "examples/reconcile/" + env.Run + "/", TTL: 2 * time.Second, Kill: *kill,
				Log: exenv.NewLog(os.Stdout),
			})
			return err
		})
		return
	}
	conn := exenv.Connection()
	if conn.Endpoints == "" {
		fmt.Fprintln(os.Stderr, "--instance and --child need --endpoints: the processes share a cluster")
		os.Exit(2)
	}
	// SIGTERM and Ctrl-C end the process cleanly: it resigns and revokes
	// its session (a child: deletes its registration).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := conn.Open(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connecting:", err)
		os.Exit(1)
	}
	defer env.Close()
	// Each process prints event lines (exenv.Events) under its name: an
	// instance's, or a child's (the service it stands for), with its pid.
	p := *prefix
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "prefix" })
	if *run != "" && !set {
		p = "examples/reconcile/" + *run + "/"
	}
	if *child != "" {
		err = RunChild(ctx, env.Client, ChildConfig{Name: *child, Version: *version, Prefix: p,
			IntentRev: *intentRev, TTL: *ttl, StartDelay: *startDelay, Ev: exenv.NewEvents(os.Stdout, *child, os.Getpid())})
	} else {
		err = RunInstance(ctx, env.Client, InstanceConfig{Name: *instance, Prefix: p, TTL: *ttl,
			CrashAfter: *crashAfter, FreezeBefore: *freezeBefore, StartDelay: *startDelay, ChildArgs: conn.Args(),
			Ev: exenv.NewEvents(os.Stdout, *instance, os.Getpid())})
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "error:", err)
		env.Close()
		os.Exit(1)
	}
}
