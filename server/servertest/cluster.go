package servertest

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/internal/transport"
	"github.com/dkv-io/dkv/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Node is one member of a test cluster.
type Node struct {
	Name     string
	Dir      string
	PeerAddr string
	Cfg      server.Config
	Srv      *server.Server // nil while stopped
	// ClientTLS, when set, is how the harness's own connection (KV,
	// Cluster) reaches a node whose client port has TLS.
	ClientTLS *tls.Config
	// Conn is the harness's own connection to the node: over its client
	// port for a Cluster member, in memory for a node from Start.
	Conn    *grpc.ClientConn
	KV      dkvpb.KVClient
	Cluster dkvpb.ClusterClient
}

// ID is the member's raft id.
func (n *Node) ID() uint64 { return server.MemberID(n.Name, n.PeerAddr) }

// Running reports whether the node is started.
func (n *Node) Running() bool { return n.Srv != nil }

// Cluster is an in-process DKV cluster on loopback: nodes are real
// servers on loopback ports, so the real gRPC peer transport is
// exercised; faults are injected through transport.Faults.
type Cluster struct {
	t      testing.TB
	Nodes  []*Node
	Faults *transport.Faults
	base   server.Config
	each   func(*Node)
}

// RandomToken returns a fresh --initial-cluster-token, so a test
// cluster's peer ports admit its own members only.
func RandomToken() string {
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return hex.EncodeToString(b)
}

// NewCluster starts an n-node cluster and waits for a leader. base sets
// options common to all nodes (zero value: fast ticks).
func NewCluster(t testing.TB, n int, base server.Config) *Cluster {
	t.Helper()
	return NewClusterEach(t, n, base, nil)
}

// NewClusterEach is NewCluster with each, if not nil, called on every
// node before it first starts, here and in Add, to set what differs per
// node in nd.Cfg (e.g. its own LeaseClock). Stop and Start keep nd.Cfg.
func NewClusterEach(t testing.TB, n int, base server.Config, each func(nd *Node)) *Cluster {
	t.Helper()
	if base.TickInterval == 0 {
		base.TickInterval = 20 * time.Millisecond
	}
	if base.Logger == nil {
		base.Logger = testutil.Quiet
	}
	if base.InitialClusterToken == "" {
		base.InitialClusterToken = RandomToken()
	}
	c := &Cluster{t: t, Faults: &transport.Faults{}, base: base, each: each}
	var parts []string
	for i := 0; i < n; i++ {
		nd := &Node{Name: fmt.Sprintf("n%d", i+1), Dir: filepath.Join(t.TempDir(), fmt.Sprintf("n%d", i+1)), PeerAddr: testutil.FreeAddr(t)}
		parts = append(parts, nd.Name+"="+nd.PeerAddr)
		c.Nodes = append(c.Nodes, nd)
	}
	for _, nd := range c.Nodes {
		cfg := base
		cfg.Name, cfg.DataDir, cfg.PeerAddr = nd.Name, nd.Dir, nd.PeerAddr
		cfg.ClientAddr = testutil.FreeAddr(t)
		cfg.InitialCluster = strings.Join(parts, ",")
		cfg.PeerFaults = c.Faults
		nd.Cfg = cfg
		if each != nil {
			each(nd)
		}
	}
	for _, nd := range c.Nodes {
		c.Start(nd)
	}
	t.Cleanup(c.StopAll)
	c.WaitLeader()
	return c
}

// Start starts (or restarts) a node with its existing data dir.
func (c *Cluster) Start(nd *Node) {
	c.t.Helper()
	srv, err := server.New(nd.Cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		c.t.Fatalf("start %s: %v", nd.Name, err)
	}
	nd.Srv = srv
	creds := insecure.NewCredentials()
	if nd.ClientTLS != nil {
		creds = credentials.NewTLS(nd.ClientTLS)
	}
	conn, err := grpc.NewClient("passthrough:///"+srv.ClientAddr(), grpc.WithTransportCredentials(creds))
	if err != nil {
		c.t.Fatal(err)
	}
	nd.Conn = conn
	nd.KV = dkvpb.NewKVClient(conn)
	nd.Cluster = dkvpb.NewClusterClient(conn)
}

// Stop stops a node (its data dir stays).
func (c *Cluster) Stop(nd *Node) { nd.Stop() }

// StopAll stops every node.
func (c *Cluster) StopAll() {
	for _, nd := range c.Nodes {
		c.Stop(nd)
	}
}

// Add creates a node that joins the running cluster through join (client
// endpoints) and starts it.
func (c *Cluster) Add(name string, join []string) *Node {
	c.t.Helper()
	nd := &Node{Name: name, Dir: filepath.Join(c.t.TempDir(), name), PeerAddr: testutil.FreeAddr(c.t)}
	cfg := c.base
	cfg.Name, cfg.DataDir, cfg.PeerAddr = nd.Name, nd.Dir, nd.PeerAddr
	cfg.ClientAddr = testutil.FreeAddr(c.t)
	cfg.Join = join
	cfg.PeerFaults = c.Faults
	nd.Cfg = cfg
	if c.each != nil {
		c.each(nd)
	}
	c.Nodes = append(c.Nodes, nd)
	c.Start(nd)
	return nd
}

// Leader returns the running node that is leader, or nil.
func (c *Cluster) Leader() *Node {
	for _, nd := range c.Nodes {
		if nd.Srv != nil && nd.Srv.IsLeader() {
			return nd
		}
	}
	return nil
}

// Followers returns the running nodes that are not leader.
func (c *Cluster) Followers() []*Node {
	var out []*Node
	for _, nd := range c.Nodes {
		if nd.Srv != nil && !nd.Srv.IsLeader() {
			out = append(out, nd)
		}
	}
	return out
}

// WaitLeader waits until exactly one running node leads and every running
// node in its partition agrees, and returns it.
func (c *Cluster) WaitLeader() *Node {
	c.t.Helper()
	var l *Node
	c.Eventually(10*time.Second, "a leader", func() bool {
		l = c.Leader()
		return l != nil && l.Srv.LeaderID() == l.ID()
	})
	return l
}

// WaitApplied waits until every running node has applied at least index.
func (c *Cluster) WaitApplied(index uint64) {
	c.t.Helper()
	c.Eventually(30*time.Second, fmt.Sprintf("all nodes applied %d", index), func() bool {
		for _, nd := range c.Nodes {
			if nd.Srv != nil && nd.Srv.AppliedIndex() < index {
				return false
			}
		}
		return true
	})
}

// WaitConverged waits until every running node has applied the leader's
// commit index.
func (c *Cluster) WaitConverged() {
	c.t.Helper()
	l := c.WaitLeader()
	c.WaitApplied(l.Srv.CommitIndex())
}

// Partition cuts every link between the two groups, both ways.
func (c *Cluster) Partition(a, b []*Node) {
	for _, x := range a {
		for _, y := range b {
			c.Faults.Cut(x.ID(), y.ID())
			c.Faults.Cut(y.ID(), x.ID())
		}
	}
}

// Isolate cuts nd off from every other node.
func (c *Cluster) Isolate(nd *Node) {
	var rest []*Node
	for _, o := range c.Nodes {
		if o != nd {
			rest = append(rest, o)
		}
	}
	c.Partition([]*Node{nd}, rest)
}

// Heal removes every network fault.
func (c *Cluster) Heal() { c.Faults.Heal() }

// Eventually polls cond every few milliseconds until it holds or the
// timeout passes, then fails the test naming what it waited for.
func (c *Cluster) Eventually(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	testutil.Eventually(c.t, timeout, what, cond)
}

// Hash returns a node's HashKV at rev.
func (c *Cluster) Hash(nd *Node, rev int64) *dkvpb.HashKVResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := nd.Cluster.HashKV(ctx, &dkvpb.HashKVRequest{Revision: rev})
	if err != nil {
		c.t.Fatalf("hashkv on %s: %v", nd.Name, err)
	}
	return h
}
