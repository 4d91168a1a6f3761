package etcdcompat

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	targetFlag = flag.String("target", "", `cluster to test: "etcd" (Debian's etcd) or "dkv" (a 3-node DKV built from this repository); default $COMPAT_TARGET, else "etcd"`)
	etcdBin    = flag.String("etcd", "/usr/bin/etcd", "etcd server binary")
	etcdctlBin = flag.String("etcdctl", "/usr/bin/etcdctl", "etcdctl binary (3.4)")
)

// target is the cluster under test.
func target(t testing.TB) string {
	t.Helper()
	v := *targetFlag
	if v == "" {
		v = os.Getenv("COMPAT_TARGET")
	}
	if v == "" {
		v = "etcd"
	}
	if v != "etcd" && v != "dkv" {
		t.Fatalf("-target=%q: want etcd or dkv", v)
	}
	return v
}

// memberNames are the names of the three members, the same for both
// targets so that outputs which print them match.
var memberNames = []string{"n1", "n2", "n3"}

// member is one server process we started, with the id its cluster
// gave it; we stop only processes we own, by their pid.
type member struct {
	*testutil.Member
	memberID uint64 // filled in by cluster.learnIDs
}

func (m *member) stop() {
	if m.Process != nil {
		m.Stop()
	}
}

func (m *member) logTail() string {
	return m.Name + " log (" + m.Log + "):\n" + m.LogTail(20)
}

// cluster is a running 3-member cluster of one kind.
type cluster struct {
	kind      string // "etcd" or "dkv"
	members   []*member
	clusterID uint64
}

// endpoints are the members' client addresses, in member order.
func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.ClientAddr)
	}
	return eps
}

func (c *cluster) logs() string {
	var b strings.Builder
	for _, m := range c.members {
		b.WriteString("\n")
		b.WriteString(m.logTail())
	}
	return b.String()
}

// startCluster starts a fresh 3-member cluster of the given kind, with its
// data in t.TempDir(), waits until every member answers etcd's Status with
// a leader and every member has published its name and client URLs, and
// stops it when the test ends.
func startCluster(t testing.TB, kind string) *cluster {
	t.Helper()
	return startClusterWith(t, kind, layout{})
}

// layout changes what startCluster picks: the members' names (default
// memberNames) and, for some members, the client address (default a free
// one), for clients that expect a member at a well-known address.
type layout struct {
	names       []string
	clientAddrs map[int]string // member index → client address
}

func (l layout) name(i int) string {
	if l.names != nil {
		return l.names[i]
	}
	return memberNames[i]
}

func (l layout) clientAddr(t testing.TB, i int) string {
	if a, ok := l.clientAddrs[i]; ok {
		return a
	}
	return testutil.FreeAddr(t)
}

// startClusterWith is startCluster with the members laid out as l says.
func startClusterWith(t testing.TB, kind string, l layout) *cluster {
	t.Helper()
	c := &cluster{kind: kind}
	switch kind {
	case "etcd":
		c.members = startEtcd(t, l)
	case "dkv":
		i := 0
		configure := func(m *testutil.Member) {
			m.Name, m.ClientAddr = l.name(i), l.clientAddr(t, i)
			i++
		}
		for _, m := range testutil.NewCluster(t, testutil.ClusterOptions{Members: len(memberNames), Configure: configure}).Members {
			c.members = append(c.members, &member{Member: m})
		}
	default:
		t.Fatalf("unknown cluster kind %q", kind)
	}
	t.Cleanup(c.stop)
	if err := c.waitReady(60 * time.Second); err != nil {
		t.Fatalf("%s cluster did not become ready: %v%s", kind, err, c.logs())
	}
	return c
}

// startEtcd starts Debian's etcd as the members of a new cluster.
func startEtcd(t testing.TB, l layout) []*member {
	t.Helper()
	base := t.TempDir()
	var ms []*member
	var initial []string
	for i := range memberNames {
		name := l.name(i)
		m := &member{Member: &testutil.Member{Name: name, ClientAddr: l.clientAddr(t, i), PeerAddr: testutil.FreeAddr(t),
			Dir: filepath.Join(base, name), Log: filepath.Join(base, name+".log"), Bin: *etcdBin}}
		ms = append(ms, m)
		initial = append(initial, m.Name+"=http://"+m.PeerAddr)
	}
	token := fmt.Sprintf("compat-%x", rand.Uint64())
	for _, m := range ms {
		m.Args = []string{
			"--name", m.Name,
			"--data-dir", m.Dir,
			"--listen-client-urls", "http://" + m.ClientAddr,
			"--advertise-client-urls", "http://" + m.ClientAddr,
			"--listen-peer-urls", "http://" + m.PeerAddr,
			"--initial-advertise-peer-urls", "http://" + m.PeerAddr,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", token,
			"--initial-cluster-state", "new",
			"--heartbeat-interval", "100",
			"--election-timeout", "1000",
			"--logger", "zap",
			"--log-level", "warn",
		}
		m.Start(t)
	}
	return ms
}

// restartAt stops m and starts it again with its data dir on the peer
// address peer: every flag that named its old peer address (its listen
// and advertise flags, its --initial-cluster entry) names the new one.
func (c *cluster) restartAt(t testing.TB, m *member, peer string) {
	t.Helper()
	m.stop()
	args := make([]string, len(m.Args))
	for i, a := range m.Args {
		args[i] = strings.ReplaceAll(a, m.PeerAddr, peer)
	}
	m.Args, m.PeerAddr = args, peer
	m.Start(t)
}

// stop stops every member; it may be called more than once.
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(m.stop)
	}
	wg.Wait()
}

// waitReady polls every member's etcd Maintenance.Status until all agree
// on a leader, then learns the member and cluster ids.
func (c *cluster) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		for _, m := range c.members {
			if !m.Running() {
				return fmt.Errorf("%s exited: %v", m.Name, m.Err())
			}
		}
		last = c.learnIDs()
		if last == nil {
			return nil
		}
		if status.Code(last) == codes.Unimplemented {
			return fmt.Errorf("%s does not serve etcd's API: %w", c.kind, last)
		}
		time.Sleep(100 * time.Millisecond) // poll interval, not a synchronisation
	}
	return last
}

func (c *cluster) learnIDs() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cli, err := c.client(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	var leader uint64
	for _, m := range c.members {
		st, err := cli.Status(ctx, m.ClientAddr)
		if err != nil {
			return fmt.Errorf("status %s: %w", m.Name, err)
		}
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return fmt.Errorf("%s: no agreed leader yet (%x)", m.Name, st.Leader)
		}
		leader = st.Leader
		m.memberID = st.Header.MemberId
		c.clusterID = st.Header.ClusterId
	}
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return err
	}
	if len(ml.Members) != len(c.members) {
		return fmt.Errorf("member list has %d members, want %d", len(ml.Members), len(c.members))
	}
	// Ready means started: every member has published its name and
	// client URLs through the log, as etcd's member list shows it.
	// Until then a member cannot be moved with member update.
	for _, m := range ml.Members {
		if m.Name == "" || len(m.ClientURLs) == 0 {
			return fmt.Errorf("member %x has not published its name and client URLs yet", m.ID)
		}
	}
	return nil
}

// client returns a clientv3 client on all the cluster's endpoints.
func (c *cluster) client(ctx context.Context) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   c.endpoints(),
		DialTimeout: 2 * time.Second,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
}

// newClient is client for tests: it fails the test on error and closes the
// client when the test ends.
func (c *cluster) newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// newClientAt is newClient on one member's endpoint only.
func (c *cluster) newClientAt(t testing.TB, m *member) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.ClientAddr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// memberByName returns the named member.
func (c *cluster) memberByName(name string) *member {
	for _, m := range c.members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// leader returns the current leader's member, polling until one is known.
func (c *cluster) leader(ctx context.Context, cli *clientv3.Client) (*member, error) {
	for {
		for _, m := range c.members {
			st, err := cli.Status(ctx, m.ClientAddr)
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, errors.New("no leader: " + ctx.Err().Error())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// makeLeader moves leadership to the named member, so outputs that show
// which member leads are the same on every run.
func (c *cluster) makeLeader(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := c.newClient(t)
	want := c.memberByName(name)
	for {
		l, err := c.leader(ctx, cli)
		if err != nil {
			t.Fatal(err)
		}
		if l == want {
			return
		}
		lc, err := clientv3.New(clientv3.Config{Endpoints: []string{l.ClientAddr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = lc.MoveLeader(ctx, want.memberID)
		lc.Close()
		if err != nil {
			if status.Code(err) == codes.Unimplemented || ctx.Err() != nil {
				t.Fatalf("move leader to %s: %v", name, err)
			}
			// Leadership may have moved meanwhile: ask again.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
