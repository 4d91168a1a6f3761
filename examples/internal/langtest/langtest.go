// Package langtest runs the Python and JavaScript examples' own tests from
// go test, so that `go test ./...` (and CI) runs them: it finds the
// interpreter, starts a DKV cluster of `dkv serve` processes with HTTP
// ports, and runs the examples' test command against it.
//
// It is for the tests of examples/python and examples/js only.
package langtest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
)

// Tool is the path of the program name (python3, node), which must pass
// check (a command line for it that exits 0 when its version will do).
// Without it the test is skipped, or fails when CI=true: CI installs it
// (.ci/run), so there a missing interpreter is a broken setup, not a
// reason to skip.
func Tool(t *testing.T, name, need string, check ...string) string {
	t.Helper()
	skip := func(msg string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true, so these tests must run")
		}
		t.Skip(msg)
	}
	p, err := exec.LookPath(name)
	if err != nil {
		skip(fmt.Sprintf("%s is not installed: these tests need %s", name, need))
	}
	if out, err := exec.Command(p, check...).CombinedOutput(); err != nil {
		skip(fmt.Sprintf("%s is not the one these tests need (%s): %v %s", p, need, err, out))
	}
	return p
}

// Cluster starts three `dkv serve` processes with HTTP ports, waits until
// each serves a linearizable read, and returns their HTTP URLs and the
// cluster (stopped when the test ends).
func Cluster(t *testing.T) ([]string, *testutil.Cluster) {
	t.Helper()
	c := testutil.NewCluster(t, testutil.ClusterOptions{HTTP: true, Kill: true})
	var urls []string
	for _, m := range c.Members {
		urls = append(urls, "http://"+m.HTTPAddr)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	for i, u := range urls {
		m := c.Members[i]
		testutil.EventuallyNoError(t, 60*time.Second, m.Name+" serves a read over HTTP", func(ctx context.Context) error {
			if !m.Running() {
				t.Fatalf("%s exited: %v%s", m.Name, m.Err(), c.Logs(20))
			}
			req, err := http.NewRequestWithContext(ctx, "POST", u+"/v1/kv/range", strings.NewReader(`{"key":"eA=="}`))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", u, resp.Status)
			}
			return nil
		})
	}
	return urls, c
}

// Run runs name with args in dir, with env added to the environment,
// killed (with everything it started in its process group) after
// timeout. It fails the test if the command fails, with its output and
// the cluster's logs, and logs the output otherwise.
func Run(t *testing.T, c *testutil.Cluster, dir string, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The examples' tests start the examples as processes of their own;
	// a group lets a timeout end those too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		// Whatever the command left behind in its group (an example it
		// did not stop) goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: not done within %v; output:\n%s%s", name, strings.Join(args, " "), timeout, out.String(), c.Logs(15))
	}
	if err != nil {
		t.Fatalf("%s %s: %v; output:\n%s%s", name, strings.Join(args, " "), err, out.String(), c.Logs(15))
	}
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out.String())
	return out.String()
}
