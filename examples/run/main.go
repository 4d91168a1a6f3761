// Command run plays one of the examples' scenarios with real processes,
// for you to watch:
//
//	go run ./examples/run scheduled-job
//
// It starts a 3-member cluster (dkv dev-cluster: three dkv serve
// processes), builds the example, starts three instances of it, each a
// process of its own (the example run with --instance NAME; some
// scenarios start more, of other kinds), and prints
// every line they print, each with the instance's name and pid. Then it
// plays the scenario's fault with real signals (kill -9 of the instance
// that holds the leadership, the lock or the job; SIGSTOP and SIGCONT to
// freeze one), says what came of it, and stops everything: the instances
// with SIGTERM (they give back what they hold), then the cluster. Its
// own lines are the ones marked "run:".
//
// The scenarios are the rows of the table in scenarios.go; each plays its
// fault in a file of its own. `go run ./examples/run` lists them.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proc"
)

func main() {
	dkvBin := flag.String("dkv", "", "the dkv binary to run the cluster with (default: go build ./cmd/dkv into the run's temporary directory)")
	keep := flag.Bool("keep", false, "keep the run's directory (the cluster's data, every process's log) instead of removing it")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./examples/run [--dkv PATH] [--keep] SCENARIO\n\nScenarios:\n")
		for _, s := range scenarios {
			fmt.Fprintf(os.Stderr, "  %-15s %s\n", s.name, s.about)
		}
		fmt.Fprintf(os.Stderr, "\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	sc := find(flag.Arg(0))
	if sc == nil {
		fmt.Fprintf(os.Stderr, "run: no scenario %q\n\n", flag.Arg(0))
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := play(ctx, os.Stdout, sc, *dkvBin, *keep)
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "run: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}

func find(name string) *scenario {
	for i := range scenarios {
		if scenarios[i].name == name {
			return &scenarios[i]
		}
	}
	return nil
}

// driver is what a scenario's fault script works with.
type driver struct {
	ctx       context.Context
	g         *proc.Group
	client    *client.Client // the driver's own, to read the outcome
	run       string         // the run's id (--run), in every key
	endpoints string
}

// say prints a line of the driver's own between the instances' lines.
func (d *driver) say(format string, args ...any) { d.g.Say("run: "+format, args...) }

// wait waits up to timeout for the first event at position from or later
// that match accepts.
func (d *driver) wait(timeout time.Duration, what string, from int, match func(exenv.Event) bool) (int, exenv.Event, error) {
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	i, e, err := d.g.Wait(ctx, from, match)
	if err != nil && d.ctx.Err() == nil {
		err = fmt.Errorf("no sign after %v of %s", timeout, what)
	}
	return i, e, err
}

// is matches the events what of instance; "" for either matches any.
func is(what, instance string) func(exenv.Event) bool {
	return func(e exenv.Event) bool {
		return (what == "" || e.What == what) && (instance == "" || e.Instance == instance)
	}
}

// instance is the running instance the event e is from.
func (d *driver) instance(e exenv.Event) *proc.Instance { return d.g.Instance(e.Instance) }

// kill9 kills in with SIGKILL, saying why.
func (d *driver) kill9(in *proc.Instance, why string) {
	d.say("kill -9 %s (%s)", in, why)
	in.Kill()
}

// freeze stops in with SIGSTOP, saying why.
func (d *driver) freeze(in *proc.Instance, why string) error {
	d.say("kill -STOP %s (%s)", in, why)
	return in.Freeze()
}

// thaw continues in with SIGCONT.
func (d *driver) thaw(in *proc.Instance, why string) error {
	d.say("kill -CONT %s (%s)", in, why)
	return in.Thaw()
}

// play plays sc, printing to out: the cluster, the instances, the fault,
// the outcome. It stops what it started before it returns.
func play(ctx context.Context, out io.Writer, sc *scenario, dkvBin string, keep bool) (err error) {
	dir, err := os.MkdirTemp("", "dkv-run-"+sc.name+"-")
	if err != nil {
		return err
	}
	defer func() {
		if keep {
			fmt.Fprintf(out, "run: kept %s: the cluster's data in cluster/, its output in cluster.log, each instance's in logs/\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if dkvBin == "" {
		dkvBin = filepath.Join(dir, "dkv")
		fmt.Fprintf(out, "run: building dkv and examples/%s (go build) ...\n", sc.name)
		if err := goBuild(ctx, root, dkvBin, "./cmd/dkv"); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(out, "run: building examples/%s (go build) ...\n", sc.name)
	}
	exBin := filepath.Join(dir, sc.name)
	if err := goBuild(ctx, root, exBin, "./examples/"+sc.name); err != nil {
		return err
	}

	base, err := freeBasePort()
	if err != nil {
		return err
	}
	clusterArgs := []string{"dev-cluster", "--nodes", "3", "--base-port", fmt.Sprint(base), "--data-dir", filepath.Join(dir, "cluster"), "--fresh"}
	logf, err := os.Create(filepath.Join(dir, "cluster.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cluster := exec.Command(dkvBin, clusterArgs...)
	cluster.Stdout, cluster.Stderr = logf, logf
	cluster.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C is the driver's to pass on
	if err := cluster.Start(); err != nil {
		return fmt.Errorf("starting dkv dev-cluster: %w", err)
	}
	clusterExited := make(chan error, 1)
	go func() { clusterExited <- cluster.Wait() }()
	defer stopCluster(out, cluster, clusterExited)
	eps := []string{fmt.Sprintf("127.0.0.1:%d", base), fmt.Sprintf("127.0.0.1:%d", base+10), fmt.Sprintf("127.0.0.1:%d", base+20)}
	endpoints := strings.Join(eps, ",")
	fmt.Fprintf(out, "run: dkv %s (pid %d): a cluster of three dkv serve processes at %s\n", strings.Join(clusterArgs, " "), cluster.Process.Pid, endpoints)
	cl, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := clusterReady(ctx, cl, clusterExited); err != nil {
		return fmt.Errorf("%w (its output: %s)", err, logf.Name())
	}

	logDir := filepath.Join(dir, "logs")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return err
	}
	d := &driver{ctx: ctx, client: cl, run: runID(), endpoints: endpoints}
	common := append([]string{"--endpoints", endpoints, "--run", d.run}, sc.args...)
	d.g = &proc.Group{Bin: exBin, Args: common, LogDir: logDir, Out: out}
	fmt.Fprintf(out, "run: %s\n", sc.about)
	fmt.Fprintf(out, "run: each instance is: go run ./examples/%s %s --instance NAME\n", sc.name, strings.Join(common, " "))
	fmt.Fprintf(out, "run: its lines read TIME NAME[PID] EVENT FIELDS; the driver's own start with run:\n\n")
	defer func() {
		fmt.Fprintln(out)
		d.say("stopping the instances with SIGTERM: each gives back what it holds")
		for _, in := range d.g.StopAll(20 * time.Second) {
			d.say("%s did not stop cleanly: %v", in, in.Err())
			if err == nil {
				err = fmt.Errorf("%s did not stop cleanly on SIGTERM: %v", in, in.Err())
			}
		}
	}()
	for _, name := range sc.instances {
		if _, err := d.g.Start(name, sc.extra[name]...); err != nil {
			return err
		}
	}
	if err := sc.fault(d); err != nil {
		return err
	}
	return nil
}

// moduleRoot is the directory of the dkv module, where go build runs.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/dkv-io/dkv").Output()
	if err != nil {
		return "", fmt.Errorf("finding the dkv module (run this from its checkout): %v", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func goBuild(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -o %s %s: %v\n%s", out, pkg, err, b)
	}
	return nil
}

// freeBasePort is a dev-cluster --base-port whose nine ports (a client,
// peer and HTTP port for each member) are free on loopback now.
func freeBasePort() (int, error) {
	for range 100 {
		n, err := rand.Int(rand.Reader, big.NewInt(2000))
		if err != nil {
			return 0, err
		}
		base := 20000 + 10*int(n.Int64())
		free := true
		for m := range 3 {
			for off := range 3 {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+10*m+off))
				if err != nil {
					free = false
					break
				}
				l.Close()
			}
		}
		if free {
			return base, nil
		}
	}
	return 0, errors.New("found no free ports for the cluster on 127.0.0.1")
}

// clusterReady waits, for at most a minute, until the cluster takes a
// write.
func clusterReady(ctx context.Context, cl *client.Client, exited <-chan error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cl.Put(wctx, "examples/run/ready", []byte("yes"))
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster took no write within a minute: %v", err)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("dkv dev-cluster exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stopCluster stops dev-cluster with SIGTERM (it stops its members), and
// kills it if it has not exited after 20 seconds.
func stopCluster(out io.Writer, c *exec.Cmd, exited <-chan error) {
	_ = c.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		fmt.Fprintln(out, "run: the cluster stopped")
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) // dev-cluster and its members: its process group
		<-exited
		fmt.Fprintln(out, "run: the cluster did not stop within 20s; killed")
	}
}

func runID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "run-" + hex.EncodeToString(b[:])
}
