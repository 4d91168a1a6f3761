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

// member is one server process we started; we stop only processes we own,
// by their pid.
type member struct {
	name     string
	client   string // host:port
	peer     string // host:port
	log      string
	bin      string
	args     []string
	memberID uint64 // filled in by cluster.learnIDs
	*testutil.Process
}

func (m *member) stop() {
	if m.Process != nil {
		m.Stop()
	}
}

func (m *member) logTail() string {
	return m.name + " log (" + m.log + "):\n" + m.LogTail(20)
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
		eps = append(eps, m.client)
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
	base := t.TempDir()
	c := &cluster{kind: kind}
	for _, name := range memberNames {
		c.members = append(c.members, &member{name: name, client: testutil.FreeAddr(t), peer: testutil.FreeAddr(t),
			log: filepath.Join(base, name+".log")})
	}
	var bin string
	var initial []string
	switch kind {
	case "etcd":
		bin = *etcdBin
		for _, m := range c.members {
			initial = append(initial, m.name+"=http://"+m.peer)
		}
	case "dkv":
		bin = testutil.DKVBinary(t)
		for _, m := range c.members {
			initial = append(initial, m.name+"="+m.peer)
		}
	default:
		t.Fatalf("unknown cluster kind %q", kind)
	}
	token := fmt.Sprintf("compat-%x", rand.Uint64())
	for _, m := range c.members {
		data := filepath.Join(base, m.name)
		var args []string
		switch kind {
		case "etcd":
			args = []string{
				"--name", m.name,
				"--data-dir", data,
				"--listen-client-urls", "http://" + m.client,
				"--advertise-client-urls", "http://" + m.client,
				"--listen-peer-urls", "http://" + m.peer,
				"--initial-advertise-peer-urls", "http://" + m.peer,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-token", token,
				"--initial-cluster-state", "new",
				"--heartbeat-interval", "100",
				"--election-timeout", "1000",
				"--logger", "zap",
				"--log-level", "warn",
			}
		case "dkv":
			args = []string{"serve",
				"--name", m.name,
				"--data-dir", data,
				"--client-addr", m.client,
				"--peer-addr", m.peer,
				"--http-addr", "",
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-token", token,
			}
		}
		m.bin, m.args = bin, args
		c.launch(t, m)
	}
	t.Cleanup(c.stop)
	if err := c.waitReady(60 * time.Second); err != nil {
		t.Fatalf("%s cluster did not become ready: %v%s", kind, err, c.logs())
	}
	return c
}

// launch starts m's process with m.bin and m.args, its output appended to
// m.log.
func (c *cluster) launch(t testing.TB, m *member) {
	t.Helper()
	m.Process = testutil.StartProcess(t, m.log, m.bin, m.args...)
}

// restartAt stops m and starts it again with its data dir on the peer
// address peer: every flag that named its old peer address (its listen
// and advertise flags, its --initial-cluster entry) names the new one.
func (c *cluster) restartAt(t testing.TB, m *member, peer string) {
	t.Helper()
	m.stop()
	args := make([]string, len(m.args))
	for i, a := range m.args {
		args[i] = strings.ReplaceAll(a, m.peer, peer)
	}
	m.args, m.peer = args, peer
	c.launch(t, m)
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
				return fmt.Errorf("%s exited: %v", m.name, m.Err())
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
		st, err := cli.Status(ctx, m.client)
		if err != nil {
			return fmt.Errorf("status %s: %w", m.name, err)
		}
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return fmt.Errorf("%s: no agreed leader yet (%x)", m.name, st.Leader)
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
		Endpoints:   []string{m.client},
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
		if m.name == name {
			return m
		}
	}
	return nil
}

// leader returns the current leader's member, polling until one is known.
func (c *cluster) leader(ctx context.Context, cli *clientv3.Client) (*member, error) {
	for {
		for _, m := range c.members {
			st, err := cli.Status(ctx, m.client)
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
		lc, err := clientv3.New(clientv3.Config{Endpoints: []string{l.client}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
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
