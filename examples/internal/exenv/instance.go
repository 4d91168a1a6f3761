package exenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Instance is one instance of a scenario running as a process of its
// own (--instance NAME), against a cluster the other instances share.
type Instance struct {
	// Name is the instance's name (--instance), in its every event line.
	Name string
	// Run is the run's id (--run): instances started with the same one
	// share their keys, as the instances of one service do.
	Run string
	// Client is the instance's own connection to the cluster.
	Client *client.Client
	// Where says in words what Client is connected to.
	Where string
	*Events
}

// instanceName is a name that reads unambiguously in an event line.
var instanceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// DefaultRun is the run id of instances started without --run, so that
// instances started by hand in three terminals share their keys.
const DefaultRun = "demo"

// MainInstances is Main for an example whose instances can also run one
// per process. With --instance NAME the process is that one instance: it
// connects to --endpoints, prints a "started" event, and runs instance
// until SIGTERM or Ctrl-C ends instance's ctx; instance then gives back
// what it holds (a lock, a leadership, a lease), with a context of its
// own (CleanupContext), and returns; the process prints "stopped" and
// exits 0. A SIGKILL or SIGSTOP gives nothing back: what the instance
// held expires with its lease. Without --instance it runs demo, the
// whole scenario in this process, as Main does.
func MainInstances(demo func(ctx context.Context, env *Env) error, instance func(ctx context.Context, in *Instance) error) {
	var name, run string
	flag.StringVar(&name, "instance", "", "run one instance called NAME in this process, against --endpoints, printing a line per event (default: the whole scenario in this process, narrated)")
	flag.StringVar(&run, "run", "", "the run's id, in every key it writes: instances started with the same --run share their keys (default with --instance: "+DefaultRun+"; else a random one)")
	ParseFlags()
	if name == "" {
		Main(func(ctx context.Context, env *Env) error {
			if run != "" {
				env.Run = run
			}
			return demo(ctx, env)
		})
		return
	}
	if !instanceName.MatchString(name) {
		fmt.Fprintf(os.Stderr, "--instance %q: a name of letters, digits, '.', '_' and '-'\n", name)
		os.Exit(2)
	}
	if flags.Endpoints == "" {
		fmt.Fprintln(os.Stderr, "--instance needs --endpoints (or DKV_ENDPOINTS): the instances share a cluster; an embedded store would be this process's alone")
		os.Exit(2)
	}
	if run == "" {
		run = DefaultRun
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	in := &Instance{Name: name, Run: run, Events: NewEvents(os.Stdout, name, os.Getpid())}
	env, err := flags.Open(ctx)
	if err != nil {
		in.Emit("failed", "err", fmt.Sprintf("connecting: %v", err))
		os.Exit(1)
	}
	in.Client, in.Where = env.Client, env.Where
	in.Emit("started", "run", run, "endpoints", flags.Endpoints)
	err = instance(ctx, in)
	if cerr := env.Close(); err == nil && ctx.Err() == nil {
		err = cerr
	}
	if err != nil {
		in.Emit("failed", "err", err)
		os.Exit(1)
	}
	in.Emit("stopped")
}

// CleanupContext is the context in which an instance gives back what it
// holds after its own ctx ended: bounded, so that an unreachable cluster
// does not keep a stopping process alive (what it holds then expires
// with its lease).
func CleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}
