package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/faultproxy"
	"github.com/dkv-io/dkv/internal/testutil"
)

// procKinds are the faults real processes take: kill -9 and restart,
// SIGSTOP/SIGCONT pauses longer than an election timeout, and network
// faults through the proxy in front of every member's peer port.
var procKinds = []string{
	"kill9-leader", "kill9-follower",
	"pause-leader", "pause-follower",
	"proxy-isolate-leader", "proxy-isolate-follower",
	"proxy-oneway-from-leader", "proxy-delay",
}

type procNode struct {
	*testutil.Member
	proxy  *faultproxy.Proxy
	paused bool
}

// procCluster is 3 `dkv serve` processes whose peers reach each other
// only through fault proxies.
type procCluster struct {
	t     testing.TB
	ids   faultproxy.ProcessIdentifier
	nodes []*procNode
	down  map[*procNode]bool
	// wproxy, with -chaos.watch-proxy, is the proxy the watchers use.
	wproxy *watchProxy
}

func newProcCluster(t testing.TB, n int) *procCluster {
	pc := &procCluster{t: t, down: map[*procNode]bool{}}
	testutil.NewCluster(t, testutil.ClusterOptions{Members: n, Kill: true, Configure: func(m *testutil.Member) {
		// The members dial each other's proxies: that is the address
		// each is known by (its --initial-cluster entry).
		p, err := faultproxy.Listen("127.0.0.1:0", m.PeerAddr, pc.ids.Identify)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		m.AdvertisePeer = p.Addr()
		m.OnStart = func(m *testutil.Member) { pc.ids.Set(m.Cmd.Process.Pid, m.Name) }
		pc.nodes = append(pc.nodes, &procNode{Member: m, proxy: p})
	}})
	t.Cleanup(func() {
		for _, nd := range pc.nodes {
			if nd.paused {
				nd.Cmd.Process.Signal(syscall.SIGCONT)
			}
		}
	})
	if _, err := pc.waitLeader(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return pc
}

func (pc *procCluster) start(nd *procNode) {
	nd.Start(pc.t)
	delete(pc.down, nd)
}

func (pc *procCluster) kill(nd *procNode) {
	nd.Kill()
	pc.down[nd] = true
}

func (pc *procCluster) Endpoints() []string {
	var eps []string
	for _, nd := range pc.nodes {
		eps = append(eps, nd.ClientAddr)
	}
	return eps
}

// status asks one node for its view; a stopped or paused node errs.
func status(ctx context.Context, ep string) (*dkvpb.StatusResponse, error) {
	conn, err := dial([]string{ep})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	return dkvpb.NewClusterClient(conn).Status(ctx, &dkvpb.StatusRequest{})
}

// leader finds the node that says it leads and that every reachable
// node agrees on.
func (pc *procCluster) leader(ctx context.Context) *procNode {
	var lead uint64
	var ln *procNode
	for _, nd := range pc.nodes {
		if pc.down[nd] || nd.paused {
			continue
		}
		st, err := status(ctx, nd.ClientAddr)
		if err != nil {
			continue // down or restarting: the others decide
		}
		if st.LeaderId == 0 {
			return nil
		}
		if lead != 0 && st.LeaderId != lead {
			return nil
		}
		lead = st.LeaderId
		if st.MemberId == st.LeaderId {
			ln = nd
		}
	}
	return ln
}

func (pc *procCluster) waitLeader(ctx context.Context, timeout time.Duration) (*procNode, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := pc.leader(ctx); l != nil {
			return l, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no agreed leader within %v (logs in %s)", timeout, filepath.Dir(pc.nodes[0].Log))
}

func (pc *procCluster) Kinds() []string {
	if pc.wproxy != nil {
		return kindsOr(append(slices.Clone(procKinds), "kill9-proxy"))
	}
	return kindsOr(procKinds)
}

func (pc *procCluster) pick(l *procNode, follower bool, target int) *procNode {
	if !follower {
		return l
	}
	var fs []*procNode
	for _, nd := range pc.nodes {
		if nd != l && !pc.down[nd] && !nd.paused {
			fs = append(fs, nd)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return fs[target%len(fs)]
}

func (pc *procCluster) healNet() error {
	for _, nd := range pc.nodes {
		nd.proxy.Heal()
	}
	return nil
}

func (pc *procCluster) Inject(ctx context.Context, f Fault) (func() error, error) {
	l, err := pc.waitLeader(ctx, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if f.Kind == "kill9-proxy" {
		if pc.wproxy == nil {
			return nil, errors.New("kill9-proxy without -chaos.watch-proxy")
		}
		pc.wproxy.kill()
		return func() error { pc.wproxy.start(); return nil }, nil
	}
	nd := pc.pick(l, strings.Contains(f.Kind, "follower") || f.Kind == "proxy-oneway-from-leader", f.Target)
	if nd == nil {
		return nil, errors.New("no follower")
	}
	switch f.Kind {
	case "kill9-leader", "kill9-follower":
		pc.kill(nd)
		return func() error { pc.start(nd); return nil }, nil
	case "pause-leader", "pause-follower":
		if err := nd.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		nd.paused = true
		return func() error { nd.paused = false; return nd.Cmd.Process.Signal(syscall.SIGCONT) }, nil
	case "proxy-isolate-leader", "proxy-isolate-follower":
		// Everything into nd, and everything nd sends to the others.
		nd.proxy.Cut(faultproxy.AllSenders)
		for _, o := range pc.nodes {
			if o != nd {
				o.proxy.Cut(nd.Name)
			}
		}
	case "proxy-oneway-from-leader":
		nd.proxy.Cut(l.Name)
	case "proxy-delay":
		for _, o := range pc.nodes {
			o.proxy.Delay(faultproxy.AllSenders, time.Duration(20+f.Target%80)*time.Millisecond)
		}
	default:
		return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	return pc.healNet, nil
}

func (pc *procCluster) Recover(ctx context.Context) error {
	pc.healNet()
	for _, nd := range pc.nodes {
		if nd.paused {
			nd.Cmd.Process.Signal(syscall.SIGCONT)
			nd.paused = false
		}
	}
	for nd := range pc.down {
		pc.start(nd)
	}
	if pc.wproxy != nil && pc.wproxy.down {
		pc.wproxy.start()
	}
	_, err := pc.waitLeader(ctx, 30*time.Second)
	return err
}

func runProcesses(t *testing.T, seed int64, d time.Duration) Result {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("process-level chaos needs Linux /proc for the fault proxies' sender identification")
	}
	pc := newProcCluster(t, 3)
	ctx := context.Background()
	kvs, closeAll, err := pinnedClients(ctx, pc.Endpoints(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	coord := CoordWorkloads(asClients(kvs), seed, d, 2*time.Second)
	if *flagWatchProxy {
		pc.wproxy = newWatchProxy(t, pc.Endpoints())
		cls, closeProxied, err := pc.wproxy.clients(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer closeProxied()
		watchThroughProxy(coord, cls)
		t.Logf("watchers through dkv proxy on %s (log %s)", pc.wproxy.addr, pc.wproxy.log)
	}
	suite := &Suite{
		Seed: seed, Duration: d, Nemesis: pc,
		Workloads: append([]Workload{&KVWorkload{Clients: kvs, Seed: seed, OpTimeout: 2 * time.Second}}, coord...),
		Checkers:  append(DefaultCheckers(), CoordCheckers()...),
		Logf:      t.Logf,
	}
	return suite.Run(ctx)
}
