package testutil

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// keyOp sends a plain-value request for key to the member's HTTP port:
// PUT stores value, GET returns what is stored.
func keyOp(ctx context.Context, m *Member, method, key, value string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+m.HTTPAddr+"/v1/keys/"+key, strings.NewReader(value))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s %s on %s: %d %s", method, key, m.Name, resp.StatusCode, b)
	}
	return string(b), nil
}

// logsOnFailure logs the tails of c's logs if the test fails.
func logsOnFailure(t *testing.T, c *Cluster) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs(20))
		}
	})
}

// waitValue waits until m answers a linearizable read of key with want.
func waitValue(t *testing.T, c *Cluster, m *Member, key, want string) {
	t.Helper()
	EventuallyNoError(t, 60*time.Second, m.Name+" reading "+key, func(ctx context.Context) error {
		if !m.Running() {
			t.Fatalf("%s exited: %v%s", m.Name, m.Err(), c.Logs(20))
		}
		got, err := keyOp(ctx, m, "GET", key, "")
		if err == nil && got != want {
			err = fmt.Errorf("%s = %q, want %q", key, got, want)
		}
		return err
	})
}

// TestClusterIsOneCluster: the members NewCluster starts form one
// cluster: a write through one member is read back through every other,
// and each member's log is written.
func TestClusterIsOneCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dkv processes; skipped with -short")
	}
	c := NewCluster(t, ClusterOptions{HTTP: true})
	logsOnFailure(t, c)
	if len(c.Members) != 3 || c.Token == "" {
		t.Fatalf("zero options: %d members, token %q; want 3 and a token", len(c.Members), c.Token)
	}
	EventuallyNoError(t, 60*time.Second, "a write through n1", func(ctx context.Context) error {
		_, err := keyOp(ctx, c.Members[0], "PUT", "k", "v")
		return err
	})
	for _, m := range c.Members[1:] {
		waitValue(t, c, m, "k", "v")
	}
	for _, m := range c.Members {
		b, err := os.ReadFile(m.Log)
		if err != nil || !strings.Contains(string(b), fmt.Sprintf("dkv member %q listening", m.Name)) {
			t.Errorf("%s's log %s does not say it listens (%v):\n%s", m.Name, m.Log, err, b)
		}
	}
}

// TestMemberRestartKeepsDataDir: a member killed and started again runs
// on its data dir (what it stored is there) and, with FreshLogs, its log
// holds the second run only.
func TestMemberRestartKeepsDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dkv processes; skipped with -short")
	}
	c := NewCluster(t, ClusterOptions{Members: 1, HTTP: true, FreshLogs: true, Kill: true})
	logsOnFailure(t, c)
	m := c.Members[0]
	EventuallyNoError(t, 60*time.Second, "a write", func(ctx context.Context) error {
		_, err := keyOp(ctx, m, "PUT", "k", "before the restart")
		return err
	})
	m.Kill()
	m.Start(t)
	waitValue(t, c, m, "k", "before the restart")
	// The member serves before its "listening" line reaches the log file:
	// wait for the line, then count.
	var b []byte
	Eventually(t, 20*time.Second, "the restarted member logs that it listens", func() bool {
		var err error
		b, err = os.ReadFile(m.Log)
		return err == nil && strings.Contains(string(b), "listening")
	})
	if n := strings.Count(string(b), "listening"); n != 1 {
		t.Errorf("the log after a restart with FreshLogs says %d times that it listens, want once:\n%s", n, b)
	}
}
