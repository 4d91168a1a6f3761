package server_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// Stopping a whole cluster at once (Ctrl-C on dev-cluster, a host
// shutdown) is not a failed handover: the leader's chosen successor is
// stopping too, or nobody is left to hand to, and no member warns.
func TestStoppingWholeClusterWarnsNothing(t *testing.T) {
	logs := map[string]*testutil.LockedBuffer{}
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) {
		logs[nd.Name] = &testutil.LockedBuffer{}
		nd.Cfg.Logger = slog.New(slog.NewTextHandler(logs[nd.Name], &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	leader := c.WaitLeader()
	var wg sync.WaitGroup
	for _, nd := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); nd.Stop() }()
	}
	wg.Wait()
	for name, l := range logs {
		for _, line := range strings.Split(l.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "handed over") {
				t.Errorf("%s warned on a whole-cluster stop: %s", name, line)
			}
		}
	}
	if !strings.Contains(logs[leader.Name].String(), "stopping: leadership") {
		t.Errorf("leader %s logged nothing about leadership while stopping:\n%s", leader.Name, logs[leader.Name])
	}
}
