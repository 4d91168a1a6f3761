package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/proxy"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const waitLong = 60 * time.Second

func startProxy(t *testing.T, listen string, nodes ...*servertest.Node) *proxy.Proxy {
	t.Helper()
	return startProxyWith(t, proxy.Config{ListenAddr: listen}, nodes...)
}

func startProxyWith(t *testing.T, cfg proxy.Config, nodes ...*servertest.Node) *proxy.Proxy {
	t.Helper()
	var eps []string
	for _, nd := range nodes {
		eps = append(eps, nd.Srv.ClientAddr())
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	cfg.Endpoints, cfg.HTTPAddr, cfg.Logger = eps, "127.0.0.1:0", testutil.Quiet
	p, err := proxy.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// dial is a DKV client of the proxy alone: no discovery, or it would
// find the members behind it.
func dial(t *testing.T, p *proxy.Proxy, user, pw string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{p.Addr()}, AutoSyncInterval: -1, Username: user, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterWatchers is how many watches the running members hold.
func clusterWatchers(c *servertest.Cluster) int64 {
	var n int64
	for _, nd := range c.Nodes {
		if nd.Running() {
			n += nd.Srv.WatchHub().Stats().Watchers
		}
	}
	return n
}

// expect reads w until it has delivered the values from..to-1 of key
// prefix+"seq", as written by putSeq, failing on any gap, duplicate or
// reordering.
func expect(w *client.Watch, from, to int) error {
	timer := time.NewTimer(waitLong)
	defer timer.Stop()
	next := from
	for next < to {
		select {
		case b, ok := <-w.Events():
			if !ok {
				return fmt.Errorf("watch closed at %d: %v", next, w.Err())
			}
			for _, ev := range b.Events {
				got, err := strconv.Atoi(string(ev.KV.Value))
				if err != nil || got != next {
					return fmt.Errorf("event %q at revision %d, want %d", ev.KV.Value, ev.Revision, next)
				}
				next++
			}
		case <-timer.C:
			return fmt.Errorf("timed out waiting for event %d", next)
		}
	}
	return nil
}

func putSeq(t *testing.T, c *client.Client, key string, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for i := from; i < to; i++ {
		if _, err := c.Put(ctx, key, []byte(strconv.Itoa(i))); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
}

// expectAll runs expect on every watch at once.
func expectAll(t *testing.T, ws []*client.Watch, from, to int) {
	t.Helper()
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = expect(w, from, to)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestCoalescedWatches: 200 watches over 10 client connections share one
// upstream watch, every one of them sees every event in order, also
// across the failure of the member that upstream watch is on, and the
// last one cancelled takes the upstream watch with it.
func TestCoalescedWatches(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	p := startProxy(t, "", c.Nodes...)
	base := clusterWatchers(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var ws []*client.Watch
	for range 10 {
		cl := dial(t, p, "", "")
		for range 20 {
			w, err := cl.WatchPrefix(ctx, "cfg/")
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
	}
	if got := p.LocalWatchers(); got != 200 {
		t.Fatalf("proxy holds %d local watchers, want 200", got)
	}
	// The regression check for coalescing itself: one upstream watch,
	// as the proxy counts it and as the members do.
	if got := p.UpstreamWatches(); got != 1 {
		t.Fatalf("proxy holds %d upstream watches for 200 watchers of one prefix, want 1", got)
	}
	if got := clusterWatchers(c) - base; got != 1 {
		t.Fatalf("the cluster holds %d watches for the proxy, want 1", got)
	}
	metrics := httpGet(t, "http://"+p.HTTPAddr()+"/metrics")
	for _, want := range []string{"dkv_proxy_local_watchers 200", "dkv_proxy_upstream_watches 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	writer := servertest.Client(t, c.Nodes...)
	putSeq(t, writer, "cfg/seq", 0, 50)
	expectAll(t, ws, 0, 50)

	// Kill the member holding the upstream watch: nothing is lost.
	var on *servertest.Node
	for _, nd := range c.Nodes {
		if nd.Srv.WatchHub().Stats().Watchers > 0 {
			on = nd
		}
	}
	if on == nil {
		t.Fatal("no member holds the upstream watch")
	}
	// The hardest case: that member is also the leader, so the watch
	// resumes while the others may have none yet.
	tctx, tcancel := context.WithTimeout(ctx, waitLong)
	defer tcancel()
	if _, err := c.WaitLeader().Cluster.LeaderTransfer(tctx, &dkvpb.LeaderTransferRequest{Name: on.Name}); err != nil {
		t.Fatalf("leader transfer to %s: %v", on.Name, err)
	}
	testutil.Eventually(t, waitLong, on.Name+" leads", func() bool { return on.Srv.IsLeader() })
	c.Stop(on)
	var rest []*servertest.Node
	for _, nd := range c.Nodes {
		if nd.Running() {
			rest = append(rest, nd)
		}
	}
	writer2 := servertest.Client(t, rest...)
	putSeq(t, writer2, "cfg/seq", 50, 100)
	expectAll(t, ws, 50, 100)
	if m := httpGet(t, "http://"+p.HTTPAddr()+"/metrics"); strings.Contains(m, "dkv_proxy_upstream_watch_resumes_total 0\n") {
		t.Error("the upstream watch never resumed: the member stopped was not the one it was on")
	}
	testutil.Eventually(t, waitLong, "the upstream watch resumed on a live member", func() bool {
		return clusterWatchers(c) == 1 && p.UpstreamWatches() == 1
	})

	for _, w := range ws {
		w.Stop()
	}
	testutil.Eventually(t, waitLong, "the last cancel ends the upstream watch", func() bool {
		return p.LocalWatchers() == 0 && p.UpstreamWatches() == 0 && clusterWatchers(c) == 0
	})
}

// TestWatchFromOlderRevision: a watch that starts before what the shared
// watch has delivered catches up on an upstream watch of its own, which
// then hands it to the shared one; one that starts later joins at once.
func TestWatchFromOlderRevision(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := dial(t, p, "", "")
	first, err := cl.WatchPrefix(ctx, "k/")
	if err != nil {
		t.Fatal(err)
	}
	putSeq(t, cl, "k/seq", 0, 10)
	expectAll(t, []*client.Watch{first}, 0, 10)
	kv, err := cl.Get(ctx, "k/seq")
	if err != nil {
		t.Fatal(err)
	}
	// Value i was written at revision kv.ModRevision-9+i.
	old, err := cl.WatchPrefix(ctx, "k/", client.WithStartRevision(kv.ModRevision-4))
	if err != nil {
		t.Fatal(err)
	}
	expectAll(t, []*client.Watch{old}, 5, 10)
	testutil.Eventually(t, waitLong, "the catching-up watch merged into the shared one", func() bool {
		return p.UpstreamWatches() == 1
	})
	newer, err := cl.WatchPrefix(ctx, "k/", client.WithStartRevision(kv.ModRevision+1))
	if err != nil {
		t.Fatal(err)
	}
	now, err := cl.WatchPrefix(ctx, "k/")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.UpstreamWatches(); got != 1 {
		t.Errorf("watches from the shared watch's revision on: %d upstream watches, want 1", got)
	}
	putSeq(t, cl, "k/seq", 10, 20)
	expectAll(t, []*client.Watch{first, old, newer, now}, 10, 20)
}

// TestProxyRestart: watchers resume from their revision on a new proxy at
// the same address and miss nothing written while it was down.
func TestProxyRestart(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	addr := p.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ws []*client.Watch
	for range 3 {
		cl := dial(t, p, "", "")
		for range 5 {
			w, err := cl.WatchPrefix(ctx, "r/")
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
	}
	writer := servertest.Client(t, nd)
	putSeq(t, writer, "r/seq", 0, 10)
	expectAll(t, ws, 0, 10)
	p.Close()
	putSeq(t, writer, "r/seq", 10, 20)
	p2 := startProxy(t, addr, nd)
	expectAll(t, ws, 10, 20)
	putSeq(t, writer, "r/seq", 20, 30)
	expectAll(t, ws, 20, 30)
	// Those that resumed after the first one caught up and merged.
	testutil.Eventually(t, waitLong, "one upstream watch after the restart", func() bool {
		return p2.UpstreamWatches() == 1
	})
}

// TestAuthIsolation: a shared upstream watch serves only callers with the
// same credentials. Root watches app/ through the proxy; alice, who may
// read only app/alice/, cannot watch app/ through it, and her own watch
// sees only her keys.
func TestAuthIsolation(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	withAlice(t, nd, nil)

	p := startProxy(t, "", nd)
	root, alice := dial(t, p, "root", "pw"), dial(t, p, "alice", "pw")
	rootW, err := root.WatchPrefix(ctx, "app/")
	must("root watches app/", err)
	if _, err := alice.WatchPrefix(ctx, "app/"); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("alice watches app/ through the proxy beside root: %v, want ErrPermissionDenied", err)
	}
	aliceW, err := alice.WatchPrefix(ctx, "app/alice/")
	must("alice watches app/alice/", err)
	if got := p.UpstreamWatches(); got != 2 {
		t.Errorf("%d upstream watches for root's and alice's, want 2", got)
	}
	for i, k := range []string{"app/alice/a", "app/bob/b", "app/alice/c"} {
		_, err := root.Put(ctx, k, []byte(strconv.Itoa(i)))
		must("put "+k, err)
	}
	if err := expect(rootW, 0, 3); err != nil {
		t.Errorf("root: %v", err)
	}
	var got []string
	for len(got) < 2 {
		select {
		case b := <-aliceW.Events():
			for _, ev := range b.Events {
				got = append(got, ev.KV.Key)
			}
		case <-ctx.Done():
			t.Fatalf("alice got %v, then nothing", got)
		}
	}
	if strings.Join(got, " ") != "app/alice/a app/alice/c" {
		t.Errorf("alice got %v, want only her two keys", got)
	}
}

// withAlice turns auth on at nd with two users: root (password pw), and
// alice (pw), who may read and write app/alice/ alone. before runs just
// before auth is turned on.
func withAlice(t *testing.T, nd *servertest.Node, before func(ctx context.Context, c *client.Client)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	setup := servertest.Client(t, nd)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("user root", setup.UserAdd(ctx, "root", "pw"))
	must("root role", setup.UserGrantRole(ctx, "root", "root"))
	must("role alice", setup.RoleAdd(ctx, "alice"))
	must("grant alice", setup.RoleGrantPermission(ctx, "alice", dkvpb.Permission_READWRITE, "app/alice/", "", true))
	must("user alice", setup.UserAdd(ctx, "alice", "pw"))
	must("alice role", setup.UserGrantRole(ctx, "alice", "alice"))
	if before != nil {
		before(ctx, setup)
	}
	must("auth enable", setup.AuthEnable(ctx))
}

// TestForwarding: calls the proxy does not handle itself reach the
// cluster with their metadata, from the DKV client and the etcd API.
func TestForwarding(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	p := startProxy(t, "", c.Nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	cl := dial(t, p, "", "")
	if _, err := cl.Put(ctx, "f/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	kv, err := cl.Get(ctx, "f/a")
	if err != nil || string(kv.Value) != "1" {
		t.Fatalf("get f/a: %v %v", kv, err)
	}
	if _, err := cl.Get(ctx, "f/none"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get of a missing key: %v, want ErrNotFound (the member's status detail, passed through)", err)
	}
	tr, err := cl.Txn(ctx).If(client.Value("f/a").Equal([]byte("1"))).Then(client.OpPut("f/b", []byte("2"))).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("txn: %+v %v", tr, err)
	}
	g, err := cl.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "f/leased", []byte("x"), client.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.KeepAliveOnce(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if err := cl.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Get(ctx, "f/leased"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a key of a revoked lease: %v, want ErrNotFound", err)
	}

	// A client that discovers endpoints learns only the proxy's.
	if err := cl.SyncEndpoints(ctx); err != nil {
		t.Fatal(err)
	}
	if eps := cl.Endpoints(); len(eps) != 1 || eps[0] != p.Addr() {
		t.Errorf("endpoints discovered through the proxy: %v, want only %s", eps, p.Addr())
	}

	// The etcd v3 API, as an etcd client would call it.
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ekv := etcdserverpb.NewKVClient(conn)
	if _, err := ekv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("f/etcd"), Value: []byte("e")}); err != nil {
		t.Fatal(err)
	}
	rr, err := ekv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("f/"), RangeEnd: []byte("f0")})
	if err != nil {
		t.Fatal(err)
	}
	if len(rr.Kvs) != 3 {
		t.Errorf("etcd range f/ through the proxy: %d keys, want 3 (f/a, f/b, f/etcd)", len(rr.Kvs))
	}
	// etcd's Watch, which the proxy answers on its shared watches.
	ew, err := etcdserverpb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ew.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: &etcdserverpb.WatchCreateRequest{Key: []byte("f/w")}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := ew.Recv(); err != nil || !r.Created {
		t.Fatalf("etcd watch through the proxy: %v %v", r, err)
	}
	if _, err := ekv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("f/w"), Value: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	if r, err := ew.Recv(); err != nil || len(r.Events) != 1 || string(r.Events[0].Kv.Value) != "w" {
		t.Fatalf("etcd watch event through the proxy: %v %v", r, err)
	}
	if body := httpGet(t, "http://"+p.HTTPAddr()+"/readyz"); !strings.Contains(body, "ok") {
		t.Errorf("/readyz: %q", body)
	}

	// With a member gone, calls go to the others.
	c.Stop(c.Followers()[0])
	for i := range 20 {
		k := "f/after/" + strconv.Itoa(i)
		if _, err := cl.Put(ctx, k, []byte("v")); err != nil {
			t.Fatalf("put %s with a member down: %v", k, err)
		}
		if _, err := cl.Get(ctx, k); err != nil {
			t.Fatalf("get %s with a member down: %v", k, err)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return string(b)
}

// TestWatchSnapshotAndCompaction: a watch with an initial snapshot gets
// its snapshot and then every event, and merges into the shared watch
// once caught up; a watch from a compacted revision fails as it would on
// a member.
func TestWatchSnapshotAndCompaction(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	cl := dial(t, p, "", "")
	shared, err := cl.WatchPrefix(ctx, "s/")
	if err != nil {
		t.Fatal(err)
	}
	putSeq(t, cl, "s/seq", 0, 5)
	expectAll(t, []*client.Watch{shared}, 0, 5)
	snap, err := cl.WatchPrefix(ctx, "s/", client.WithInitialSnapshot())
	if err != nil {
		t.Fatal(err)
	}
	if init := snap.Initial(); init == nil || len(init.KVs) != 1 || string(init.KVs[0].Value) != "4" {
		t.Fatalf("initial snapshot through the proxy: %+v, want s/seq=4", init)
	}
	putSeq(t, cl, "s/seq", 5, 10)
	expectAll(t, []*client.Watch{shared, snap}, 5, 10)
	testutil.Eventually(t, waitLong, "the snapshot watch merged into the shared one", func() bool {
		return p.UpstreamWatches() == 1
	})
	putSeq(t, cl, "s/seq", 10, 15)
	expectAll(t, []*client.Watch{shared, snap}, 10, 15)

	kv, err := cl.Get(ctx, "s/seq")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Compact(ctx, kv.ModRevision); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.WatchPrefix(ctx, "s/", client.WithStartRevision(kv.ModRevision-3)); !errors.Is(err, client.ErrCompacted) {
		t.Errorf("a watch from a compacted revision through the proxy: %v, want ErrCompacted", err)
	}
	testutil.Eventually(t, waitLong, "the refused watch's upstream watch gone", func() bool {
		return p.UpstreamWatches() == 1 && p.LocalWatchers() == 2
	})
}

// TestSlowLocalStream: a local stream that stops reading does not hold up
// the shared watch; it is ended with Unavailable once its queue is full,
// after a gapless prefix of the events, so its client can resume.
func TestSlowLocalStream(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxyWith(t, proxy.Config{MaxLocalQueue: 4}, nd)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	cl := dial(t, p, "", "")
	fast, err := cl.WatchPrefix(ctx, "slow/")
	if err != nil {
		t.Fatal(err)
	}
	// Fixed windows (which turns gRPC's window growth off) keep what the
	// slow stream can absorb unread far below what is written.
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	slow, err := dkvpb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := slow.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte("slow/"), Prefix: true, WatchId: 7}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := slow.Recv(); err != nil || !r.Created {
		t.Fatalf("slow stream's first response: %v %v", r, err)
	}
	// Large values fill the slow stream's flow-control window, so the
	// proxy's queue for it grows while the fast watch gets everything.
	pad := strings.Repeat("x", 100<<10)
	const n = 40
	for i := range n {
		if _, err := cl.Put(ctx, "slow/seq", []byte(strconv.Itoa(i)+" "+pad)); err != nil {
			t.Fatal(err)
		}
	}
	for next := 0; next < n; {
		select {
		case b, ok := <-fast.Events():
			if !ok {
				t.Fatalf("fast watch closed: %v", fast.Err())
			}
			for _, ev := range b.Events {
				if v, _, _ := strings.Cut(string(ev.KV.Value), " "); v != strconv.Itoa(next) {
					t.Fatalf("fast watch: event %s, want %d", v, next)
				}
				next++
			}
		case <-ctx.Done():
			t.Fatalf("fast watch stuck at %d behind a slow stream", next)
		}
	}
	next := 0
	for {
		r, err := slow.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("slow stream ended with %v, want Unavailable", err)
			}
			break
		}
		for _, ev := range r.Events {
			if v, _, _ := strings.Cut(string(ev.Kv.Value), " "); v != strconv.Itoa(next) {
				t.Fatalf("slow stream: event %s, want %d", v, next)
			}
			next++
		}
	}
	if next >= n {
		t.Errorf("the slow stream got all %d events; it was never behind", n)
	}
}

// TestReadyz: /readyz is 503 until a member is reachable, then 200.
func TestReadyz(t *testing.T) {
	addr := testutil.FreeAddr(t)
	p, err := proxy.Start(proxy.Config{Endpoints: []string{addr}, ListenAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: testutil.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ready := func() int {
		resp, err := http.Get("http://" + p.HTTPAddr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with no member up: %d, want 503", code)
	}
	servertest.Start(t, servertest.WithConfig(func(c *server.Config) { c.ClientAddr = addr }))
	testutil.Eventually(t, waitLong, "/readyz 200 once the member is up", func() bool { return ready() == http.StatusOK })
}

// TestProgressRequest: a progress request on a local stream is answered
// for each of its watches, from the cluster, at a revision no older than
// the last write.
func TestProgressRequest(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := dkvpb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{1, 2} {
		if err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte("p/"), Prefix: true, WatchId: id}}}); err != nil {
			t.Fatal(err)
		}
		if r, err := st.Recv(); err != nil || !r.Created || r.WatchId != id {
			t.Fatalf("create %d: %v %v", id, r, err)
		}
	}
	if got := p.UpstreamWatches(); got != 1 {
		t.Fatalf("%d upstream watches for two watches of one prefix on one stream, want 1", got)
	}
	cl := servertest.Client(t, nd)
	pr, err := cl.Put(ctx, "other", []byte("x")) // outside the prefix: no event
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_ProgressRequest{ProgressRequest: &dkvpb.WatchProgressRequest{}}}); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for len(seen) < 2 {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Events) > 0 || r.Created || r.Canceled || seen[r.WatchId] {
			t.Fatalf("unexpected response %v", r)
		}
		if r.Header.GetRevision() < pr.Revision {
			t.Errorf("progress of watch %d at revision %d, older than the write at %d", r.WatchId, r.Header.GetRevision(), pr.Revision)
		}
		seen[r.WatchId] = true
	}
}

// TestHTTPHostGuard: a web page whose DNS name an attacker rebinds to
// the proxy's HTTP port reads none of its metrics (421), as on a
// member's HTTP port; the probes answer any name, the proxy's own
// addresses and --http-allowed-hosts names get the metrics, and a page
// of another site fetching them is refused.
func TestHTTPHostGuard(t *testing.T) {
	p, err := proxy.Start(proxy.Config{Endpoints: []string{testutil.FreeAddr(t)}, ListenAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		HTTPAllowedHosts: []string{"metrics.example:9000"}, Logger: testutil.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, port, _ := strings.Cut(p.HTTPAddr(), ":")
	get := func(host, path string, hdr ...string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+p.HTTPAddr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, host, path string
		hdr              []string
		want             int
	}{
		{"rebound name", "evil.example:" + port, "/metrics", nil, http.StatusMisdirectedRequest},
		{"rebound name, no port", "evil.example", "/metrics", nil, http.StatusMisdirectedRequest},
		{"own address", p.HTTPAddr(), "/metrics", nil, http.StatusOK},
		{"localhost", "localhost:" + port, "/metrics", nil, http.StatusOK},
		{"allowed host, any port", "metrics.example:" + port, "/metrics", nil, http.StatusOK},
		{"probe by any name", "evil.example", "/livez", nil, http.StatusOK},
		{"another site's page", p.HTTPAddr(), "/metrics", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}, http.StatusForbidden},
		{"another origin", p.HTTPAddr(), "/metrics", []string{"Origin", "http://evil.example"}, http.StatusForbidden},
	} {
		code, body := get(tc.host, tc.path, tc.hdr...)
		if code != tc.want {
			t.Errorf("%s: GET %s with Host %q: %d, want %d (%.100s)", tc.name, tc.path, tc.host, code, tc.want, strings.TrimSpace(body))
		}
		if code != http.StatusOK && strings.Contains(body, "dkv_proxy_") {
			t.Errorf("%s: refused, yet the body holds metrics", tc.name)
		}
	}
	if _, err := proxy.Start(proxy.Config{Endpoints: []string{"127.0.0.1:1"}, ListenAddr: "127.0.0.1:0", HTTPAllowedHosts: []string{"http://x.example/"}}); err == nil {
		t.Error("Start with a URL as an allowed host: no error")
	}
}
