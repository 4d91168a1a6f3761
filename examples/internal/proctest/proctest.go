// Package proctest is what the examples' process tests share: a cluster
// of `dkv serve` processes, the example's binary built once per test
// binary, its instances started as processes (examples/internal/proc)
// that are killed when the test ends and whose logs a failing test
// prints, bounded waits for their events, and the embedded store of the
// in-process tests.
package proctest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proc"
	"github.com/dkv-io/dkv/internal/testutil"
)

// Skip skips the test with -short: it builds binaries and runs processes.
func Skip(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the example and runs it as processes against dkv serve processes; skipped with -short")
	}
}

// Cluster starts a cluster of three `dkv serve` processes
// (testutil.NewCluster, killed when the test ends), waits until it has
// a leader, and returns it with a client (closed when the test ends)
// and its endpoints as --endpoints takes them.
func Cluster(t *testing.T) (*testutil.Cluster, *client.Client, string) {
	t.Helper()
	c := testutil.NewCluster(t, testutil.ClusterOptions{Kill: true})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs(20))
		}
	})
	eps := strings.Join(c.ClientAddrs(), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Endpoints: c.ClientAddrs(), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	testutil.EventuallyNoError(t, 60*time.Second, "the cluster to accept a write", func(ctx context.Context) error {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cl.Put(wctx, "proctest/ready", []byte("yes"))
		return err
	})
	return c, cl, eps
}

// Example is the binary of examples/NAME, built once per test binary.
func Example(t *testing.T, name string) string {
	t.Helper()
	return testutil.ProgramBinary(t, "./examples/"+name, false)
}

// Start starts the instances names of bin, each with args then
// --instance NAME, in a group whose logs are in a temporary directory.
// Every line they print goes to the test's log. When the test ends, the
// instances still running are killed; if it failed, each one's log
// tail is logged.
func Start(t *testing.T, bin string, args []string, names ...string) *proc.Group {
	t.Helper()
	g := &proc.Group{Bin: bin, Args: args, LogDir: t.TempDir(), Out: exenv.TestWriter(t.Logf)}
	t.Cleanup(func() {
		g.KillAll()
		if t.Failed() {
			for _, in := range g.Instances() {
				t.Logf("%s's log (%s):\n%s", in, in.Log, in.LogTail(30))
			}
		}
	})
	for _, n := range names {
		if _, err := g.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// Wait waits up to timeout for an event at position from or later that
// match accepts, and returns its position and the event; it fails the
// test, naming what it waited for, if none comes.
func Wait(t *testing.T, g *proc.Group, timeout time.Duration, what string, from int, match func(exenv.Event) bool) (int, exenv.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	i, ev, err := g.Wait(ctx, from, match)
	if err != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
	return i, ev
}

// Is matches the events what of instance; "" for either matches any.
func Is(what, instance string) func(exenv.Event) bool {
	return func(e exenv.Event) bool {
		return (what == "" || e.What == what) && (instance == "" || e.Instance == instance)
	}
}

// StopAll stops every running instance with SIGTERM and fails the test
// for each that does not exit with status 0 within 20 seconds.
func StopAll(t *testing.T, g *proc.Group) {
	t.Helper()
	for _, in := range g.StopAll(20 * time.Second) {
		t.Errorf("%s did not stop cleanly on SIGTERM: %v", in, in.Err())
	}
}

// Count is the number of events for which match holds.
func Count(g *proc.Group, match func(exenv.Event) bool) int {
	n := 0
	for _, e := range g.Events() {
		if match(e) {
			n++
		}
	}
	return n
}

// Describe is the events for which match holds, a line each, for a
// failure message.
func Describe(g *proc.Group, match func(exenv.Event) bool) string {
	var b strings.Builder
	for _, e := range g.Events() {
		if match(e) {
			fmt.Fprintf(&b, "\n  %s", e.Line)
		}
	}
	return b.String()
}

// Embedded opens an embedded single-node store for an example's
// in-process test, closed when the test ends, with a context that ends
// after timeout (or with the test).
func Embedded(t *testing.T, timeout time.Duration) (context.Context, *exenv.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	env, err := exenv.OpenEmbedded(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	return ctx, env
}
