package chaos

import (
	"context"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

var flagWatchProxy = flag.Bool("chaos.watch-proxy", false, "process phase: the watch workload's watchers and its sentinel and reference reads go through a `dkv proxy` process, which the nemesis also kills and restarts (fault kind kill9-proxy)")

// watchProxy is a `dkv proxy` process in front of the process cluster,
// restarted on the same address after each kill, so its clients resume
// their watches from their revisions through a new process.
type watchProxy struct {
	t         testing.TB
	addr      string
	endpoints string
	log       string
	proc      *testutil.Process
	down      bool
}

// proxyStartTimeout bounds the wait for a (re)started proxy to accept
// connections.
const proxyStartTimeout = 15 * time.Second

func newWatchProxy(t testing.TB, endpoints []string) *watchProxy {
	p := &watchProxy{t: t, addr: testutil.FreeAddr(t), endpoints: strings.Join(endpoints, ","), log: filepath.Join(t.TempDir(), "proxy.log")}
	p.start()
	t.Cleanup(func() { p.proc.Stop() })
	return p
}

func (p *watchProxy) start() {
	p.proc = testutil.StartProcess(p.t, p.log, testutil.DKVBinary(p.t), "proxy", "--endpoints", p.endpoints, "--listen-addr", p.addr, "--http-addr", "")
	p.down = false
	deadline := time.Now().Add(proxyStartTimeout)
	for {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if !p.proc.Running() || time.Now().After(deadline) {
			p.t.Errorf("proxy on %s not accepting connections within %v:\n%s", p.addr, proxyStartTimeout, p.proc.LogTail(20))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *watchProxy) kill() {
	p.proc.Kill()
	p.down = true
}

// clients are n clients of the proxy alone: no discovery, or they would
// find the members behind it.
func (p *watchProxy) clients(ctx context.Context, n int) ([]*client.Client, func(), error) {
	var cls []*client.Client
	closeAll := func() {
		for _, c := range cls {
			c.Close()
		}
	}
	for range n {
		c, err := client.New(ctx, client.Config{Endpoints: []string{p.addr}, DialTimeout: -1, AutoSyncInterval: -1, MaxRetries: 3})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("client of proxy %s: %w", p.addr, err)
		}
		cls = append(cls, c)
	}
	return cls, closeAll, nil
}

// watchThroughProxy points the watch workload among ws at cls.
func watchThroughProxy(ws []Workload, cls []*client.Client) {
	for _, w := range ws {
		if ww, ok := w.(*WatchWorkload); ok {
			ww.Clients = cls
		}
	}
}
