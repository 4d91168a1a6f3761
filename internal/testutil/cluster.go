package testutil

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ClusterOptions says what NewCluster starts. The zero value is three
// members, no HTTP ports, a fresh token, stopped with SIGTERM when the
// test ends.
type ClusterOptions struct {
	// Members is the number of members; 0 means 3.
	Members int
	// HTTP gives every member an HTTP address of its own; without it
	// the members run with --http-addr "" (no HTTP port).
	HTTP bool
	// Token is the --initial-cluster-token; empty means a fresh random
	// one, so that the cluster's peer ports admit its own members only.
	Token string
	// NoToken starts the members without --initial-cluster-token: a
	// cluster that names its peer secret in Args, or runs --insecure-peer.
	NoToken bool
	// Args are appended to every member's serve arguments.
	Args []string
	// Kill ends the members with SIGKILL when the test ends, not SIGTERM
	// and a wait: quicker, for a test that checks nothing at shutdown.
	Kill bool
	// FreshLogs empties a member's log at each start (Member.FreshLog).
	FreshLogs bool
	// Configure, if not nil, is called on every member once its
	// addresses are picked and before any member starts: to put a fault
	// proxy in front of its peer port (AdvertisePeer), or to set OnStart.
	Configure func(m *Member)
}

// Cluster is a cluster of `dkv serve` processes a test started.
type Cluster struct {
	Members []*Member
	Token   string // the --initial-cluster-token; empty with NoToken
}

// Member is one `dkv serve` process of a test: what it is started with,
// and the Process once it is. A test may change Args (or Bin) between a
// Stop or Kill and the next Start.
type Member struct {
	Name       string
	ClientAddr string
	PeerAddr   string
	HTTPAddr   string // empty: no HTTP port
	Dir        string // its --data-dir
	// Log is the path of the file its output is appended to (the
	// Process's Log once started); empty means <Name>.log beside Dir.
	Log string
	// Bin is the binary Start runs; empty means DKVBinary.
	Bin  string
	Args []string // Bin's arguments, "serve" first
	// AdvertisePeer, if set, is the address the other members dial for
	// this member's peer port (a proxy in front of PeerAddr): its entry
	// in --initial-cluster and its --advertise-peer-addr.
	AdvertisePeer string
	// OnStart, if not nil, is called after every Start, with the new
	// Process.
	OnStart func(m *Member)
	// FreshLog empties Log at each Start, so a test reading it sees the
	// lines of the current run only.
	FreshLog bool
	*Process // nil until started
}

// NewCluster picks addresses for o.Members members named n1, n2, ...,
// with their data dirs and logs in one t.TempDir(), starts them as a
// new cluster (--initial-cluster naming all of them), and stops them when
// the test ends. It does not wait for the cluster to be ready: how to ask
// (the Go client, HTTP, etcd's API) is the caller's.
func NewCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	n := o.Members
	if n == 0 {
		n = 3
	}
	base := t.TempDir()
	c := &Cluster{}
	var initial []string
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		m := &Member{Name: name, ClientAddr: FreeAddr(t), PeerAddr: FreeAddr(t),
			Dir: filepath.Join(base, name), Log: filepath.Join(base, name+".log"), FreshLog: o.FreshLogs}
		if o.HTTP {
			m.HTTPAddr = FreeAddr(t)
		}
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		if o.Configure != nil {
			o.Configure(m)
		}
		peer := m.PeerAddr
		if m.AdvertisePeer != "" {
			peer = m.AdvertisePeer
		}
		initial = append(initial, m.Name+"="+peer)
	}
	if !o.NoToken {
		c.Token = o.Token
		if c.Token == "" {
			c.Token = fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
		}
	}
	t.Cleanup(func() {
		if o.Kill {
			c.Kill()
		} else {
			c.Stop()
		}
	})
	for _, m := range c.Members {
		m.Args = []string{"serve", "--name", m.Name, "--data-dir", m.Dir,
			"--client-addr", m.ClientAddr, "--peer-addr", m.PeerAddr, "--http-addr", m.HTTPAddr,
			"--initial-cluster", strings.Join(initial, ",")}
		if c.Token != "" {
			m.Args = append(m.Args, "--initial-cluster-token", c.Token)
		}
		if m.AdvertisePeer != "" {
			m.Args = append(m.Args, "--advertise-peer-addr", m.AdvertisePeer)
		}
		m.Args = append(m.Args, o.Args...)
		m.Start(t)
	}
	return c
}

// ClientAddrs are the members' client addresses, in member order.
func (c *Cluster) ClientAddrs() []string {
	var addrs []string
	for _, m := range c.Members {
		addrs = append(addrs, m.ClientAddr)
	}
	return addrs
}

// Member is the member named name, or nil.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Stop stops every started member (Process.Stop), all at once; it may be
// called more than once.
func (c *Cluster) Stop() { c.each((*Process).Stop) }

// Kill kills every started member; it may be called more than once.
func (c *Cluster) Kill() { c.each((*Process).Kill) }

func (c *Cluster) each(f func(*Process)) {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		if p := m.Process; p != nil {
			wg.Go(func() { f(p) })
		}
	}
	wg.Wait()
}

// Logs is the last n lines of every started member's log, for a failure
// message.
func (c *Cluster) Logs(n int) string {
	var b strings.Builder
	for _, m := range c.Members {
		if m.Process != nil {
			fmt.Fprintf(&b, "\n%s log (%s):\n%s", m.Name, m.Log, m.LogTail(n))
		}
	}
	return b.String()
}

// Start starts m, or starts it again after a Stop or Kill, with Bin and
// Args, its output in Log. It registers no cleanup: NewCluster's stops
// the members it made; a test that makes a Member itself stops it.
func (m *Member) Start(t testing.TB) {
	t.Helper()
	if m.Log == "" {
		if m.Dir == "" {
			t.Fatalf("member %s has neither a log path nor a data dir", m.Name)
		}
		m.Log = filepath.Join(filepath.Dir(m.Dir), m.Name+".log")
	}
	if m.FreshLog {
		if err := os.Remove(m.Log); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	bin := m.Bin
	if bin == "" {
		bin = DKVBinary(t)
	}
	m.Process = StartProcess(t, m.Log, bin, m.Args...)
	if m.OnStart != nil {
		m.OnStart(m)
	}
}
