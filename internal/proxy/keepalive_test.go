package proxy_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/proxy"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestKeepAliveSharing: the lease keep-alive streams of many local
// clients with the same credentials ride on one upstream stream; each
// local request is answered with the cluster's answer for its lease (the
// granted TTL, or not found once revoked); a stream that sends an
// invalid id is refused alone.
func TestKeepAliveSharing(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()

	// DKV clients keeping their leases alive through the proxy.
	var ids []int64
	for range 5 {
		cl := dial(t, p, "", "")
		g, err := cl.Grant(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.KeepAlive(ctx, g.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.ID)
	}
	testutil.Eventually(t, waitLong, "5 local keep-alive streams on 1 upstream stream", func() bool {
		return p.LocalKeepAlives() == 5 && p.UpstreamKeepAlives() == 1
	})

	// Raw local streams: every request gets the cluster's answer.
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lc := dkvpb.NewLeaseClient(conn)
	g, err := lc.Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: 7000})
	if err != nil {
		t.Fatal(err)
	}
	var sts []dkvpb.Lease_KeepAliveClient
	for range 3 {
		st, err := lc.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sts = append(sts, st)
	}
	renew := func(st dkvpb.Lease_KeepAliveClient, id int64) *dkvpb.LeaseKeepAliveResult {
		t.Helper()
		if err := st.Send(&dkvpb.LeaseKeepAliveRequest{Ids: []int64{id}}); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Results) != 1 || r.Results[0].Id != id {
			t.Fatalf("keep-alive of %d answered with %v", id, r.Results)
		}
		return r.Results[0]
	}
	for i := range 20 {
		for _, st := range sts {
			if r := renew(st, g.Id); r.NotFound || r.TtlMs != 7000 {
				t.Fatalf("round %d: keep-alive through the proxy: ttl %d ms, not found %v; want the granted 7000", i, r.TtlMs, r.NotFound)
			}
		}
	}
	if _, err := lc.Revoke(ctx, &dkvpb.LeaseRevokeRequest{Id: g.Id}); err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if r := renew(st, g.Id); !r.NotFound || r.TtlMs != 0 {
			t.Errorf("keep-alive of a revoked lease through the proxy: ttl %d ms, not found %v", r.TtlMs, r.NotFound)
		}
	}
	if got := p.UpstreamKeepAlives(); got != 1 {
		t.Errorf("%d upstream keep-alive streams for 8 local ones with one identity, want 1", got)
	}

	// An invalid id ends its own stream with InvalidArgument, not the
	// shared one.
	if err := sts[0].Send(&dkvpb.LeaseKeepAliveRequest{Ids: []int64{-1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sts[0].Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("keep-alive of lease -1: %v, want InvalidArgument", err)
	}
	for _, id := range ids {
		if r := renew(sts[1], id); r.NotFound || r.TtlMs != 30000 {
			t.Errorf("lease %d after another stream's bad request: ttl %d ms, not found %v", id, r.TtlMs, r.NotFound)
		}
	}
	for _, st := range sts[1:] {
		st.CloseSend()
		if _, err := st.Recv(); err == nil {
			t.Error("a half-closed keep-alive stream got another answer")
		}
	}
}

// TestKeepAliveBatchLimitIsTheMembers: the proxy refuses exactly the
// keep-alive requests a member refuses. A request naming more leases
// than the proxy once allowed, but no more than a member takes, is
// answered through the proxy as by the member (every lease, found or
// not); one over the member's limit is refused with InvalidArgument on
// its own stream, as by the member.
func TestKeepAliveBatchLimitIsTheMembers(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lc := dkvpb.NewLeaseClient(conn)
	g, err := lc.Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: 9000})
	if err != nil {
		t.Fatal(err)
	}
	const n = 15000 // above 10,000, the proxy's limit before it shared the member's
	ids := []int64{g.Id}
	for id := int64(1); len(ids) < n; id++ {
		if id != g.Id {
			ids = append(ids, id)
		}
	}
	st, err := lc.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&dkvpb.LeaseKeepAliveRequest{Ids: ids}); err != nil {
		t.Fatal(err)
	}
	got := map[int64]*dkvpb.LeaseKeepAliveResult{}
	for len(got) < n {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("keep-alive of %d leases through the proxy, after %d answers: %v; a member answers it", n, len(got), err)
		}
		for _, res := range r.Results {
			got[res.Id] = res
		}
	}
	if r := got[g.Id]; r.NotFound || r.TtlMs != 9000 {
		t.Errorf("the granted lease in a batch of %d: ttl %d ms, not found %v; want 9000", n, r.TtlMs, r.NotFound)
	}
	if r := got[ids[1]]; !r.NotFound {
		t.Errorf("lease %d, never granted, in a batch: not found %v", ids[1], r.NotFound)
	}

	// One over the member's limit: refused by both, the same way.
	tooMany := make([]int64, 20001)
	for i := range tooMany {
		tooMany[i] = int64(i + 1)
	}
	mconn, err := grpc.NewClient("passthrough:///"+nd.Srv.ClientAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer mconn.Close()
	for name, c := range map[string]dkvpb.LeaseClient{"proxy": lc, "member": dkvpb.NewLeaseClient(mconn)} {
		st, err := c.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&dkvpb.LeaseKeepAliveRequest{Ids: tooMany}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit per request is 20000") {
			t.Errorf("keep-alive of %d leases through the %s: %v, want InvalidArgument naming the limit", len(tooMany), name, err)
		}
	}
}

// TestEtcdKeepAliveSharing: etcd's LeaseKeepAlive streams of local
// clients with the same metadata ride on one upstream stream; every
// renewal is answered with the cluster's answer for its lease, to that
// client: the lease's own TTL, and, for a lease revoked or never
// granted, TTL 0 as etcd answers it, on the streams that asked for that
// lease only, which stay open.
func TestEtcdKeepAliveSharing(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	// The proxy under test reaches the member through a plain relay (a
	// proxy that shares and caches nothing), whose count of relayed calls
	// is the streams the member is asked to hold.
	relay := startProxyWith(t, proxy.Config{NoKeepAliveSharing: true, ReadCacheBytes: -1}, nd)
	p, err := proxy.Start(proxy.Config{Endpoints: []string{relay.Addr()}, ListenAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Logger: testutil.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	relayed := func() float64 { return metric(t, relay, "dkv_proxy_forwarded_calls_total") }
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	lc := etcdserverpb.NewLeaseClient(conn)
	grant := func(ttl int64) int64 {
		g, err := lc.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	// Two leases of different TTLs, so that an answer handed to the
	// wrong client, or remembered from another lease, shows.
	a, b := grant(30), grant(7)
	ttlOf := map[int64]int64{a: 30, b: 7}

	const n = 6
	before := relayed()
	sts := make([]etcdserverpb.Lease_LeaseKeepAliveClient, n)
	for i := range sts {
		if sts[i], err = lc.LeaseKeepAlive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Streams 0..2 keep a alive, 3..5 keep b alive.
	leaseOf := func(i int) int64 {
		if i < n/2 {
			return a
		}
		return b
	}
	renew := func(st etcdserverpb.Lease_LeaseKeepAliveClient, id int64) (*etcdserverpb.LeaseKeepAliveResponse, error) {
		if err := st.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: id}); err != nil {
			return nil, err
		}
		return st.Recv()
	}
	// rounds renews on every stream at once, rounds times, and checks
	// each answer with want.
	rounds := func(what string, rounds int, want func(id int64) int64) {
		t.Helper()
		var wg sync.WaitGroup
		for i, st := range sts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := leaseOf(i)
				for r := range rounds {
					resp, err := renew(st, id)
					if err != nil {
						t.Errorf("%s: stream %d, round %d, keep-alive of %x: %v", what, i, r, id, err)
						return
					}
					if resp.ID != id || resp.TTL != want(id) || resp.Header == nil || resp.Header.Revision == 0 {
						t.Errorf("%s: stream %d, round %d, keep-alive of %x answered id %x ttl %d header %v; want id %x ttl %d with the member's header",
							what, i, r, id, resp.ID, resp.TTL, resp.Header, id, want(id))
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	rounds("both leases", 20, func(id int64) int64 { return ttlOf[id] })
	if l, u := p.LocalKeepAlives(), p.UpstreamKeepAlives(); l != n || u != 1 {
		t.Errorf("%d local etcd keep-alive streams on %d upstream streams; want %d on 1", l, u, n)
	}
	if up := metric(t, p, "dkv_proxy_upstream_keepalive_streams"); up != 1 {
		t.Errorf("dkv_proxy_upstream_keepalive_streams %v, want 1", up)
	}
	if got := relayed() - before; got != 1 {
		t.Errorf("the member was asked for %v keep-alive streams for %d local ones; want 1", got, n)
	}

	if _, err := lc.LeaseRevoke(ctx, &etcdserverpb.LeaseRevokeRequest{ID: a}); err != nil {
		t.Fatal(err)
	}
	rounds("a revoked", 3, func(id int64) int64 {
		if id == a {
			return 0
		}
		return ttlOf[id]
	})
	// A lease never granted, on a stream that keeps b alive too: TTL 0
	// for it, and the stream goes on.
	if resp, err := renew(sts[n-1], 0x7eadbeef); err != nil || resp.ID != 0x7eadbeef || resp.TTL != 0 {
		t.Errorf("keep-alive of a lease never granted: %v, %v; want TTL 0", resp, err)
	}
	if resp, err := renew(sts[n-1], b); err != nil || resp.TTL != 7 {
		t.Errorf("keep-alive of b after one of a lease never granted: %v, %v; want TTL 7", resp, err)
	}
	for _, st := range sts {
		st.CloseSend()
		if _, err := st.Recv(); err != io.EOF {
			t.Errorf("a half-closed etcd keep-alive stream: %v, want the end of the stream", err)
		}
	}
	testutil.Eventually(t, waitLong, "no upstream keep-alive stream once every local one ended", func() bool {
		return p.UpstreamKeepAlives() == 0 && p.LocalKeepAlives() == 0
	})
}

// renewCounter is an etcd Lease service that answers each keep-alive
// request with TTL = the number of requests it has received so far
// (lease 2 is not found: TTL 0), so a client can tell whether the answer
// it got is to a request the member received after the client asked.
type renewCounter struct {
	etcdserverpb.UnimplementedLeaseServer
	received, streams atomic.Int64
}

func (c *renewCounter) LeaseKeepAlive(st etcdserverpb.Lease_LeaseKeepAliveServer) error {
	c.streams.Add(1)
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		ttl := c.received.Add(1)
		if req.ID == 2 {
			ttl = 0
		}
		if err := st.Send(&etcdserverpb.LeaseKeepAliveResponse{Header: &etcdserverpb.ResponseHeader{Revision: 1}, ID: req.ID, TTL: ttl}); err != nil {
			return err
		}
	}
}

// TestEtcdKeepAliveAnswersAfterTheAsk: through a shared upstream stream,
// every etcd keep-alive is answered with the member's answer to a request
// the member received after the client asked: never an answer the proxy
// remembered from before, never one it made up; and a lease not found is
// answered TTL 0 to the client that asked for it alone.
func TestEtcdKeepAliveAnswersAfterTheAsk(t *testing.T) {
	m := &renewCounter{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	etcdserverpb.RegisterLeaseServer(srv, m)
	go srv.Serve(lis)
	defer srv.Stop()
	p, err := proxy.Start(proxy.Config{Endpoints: []string{lis.Addr().String()}, ListenAddr: "127.0.0.1:0", Logger: testutil.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()

	const n, rounds = 8, 50
	var wg sync.WaitGroup
	for i := range n {
		st, err := etcdserverpb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				id := int64(1)
				if i == 0 && r%2 == 1 {
					id = 2 // only stream 0 asks for the lease not found
				}
				asked := m.received.Load()
				if err := st.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: id}); err != nil {
					t.Error(err)
					return
				}
				resp, err := st.Recv()
				if err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
				switch {
				case resp.ID != id:
					t.Errorf("stream %d asked for lease %d, was answered for %d", i, id, resp.ID)
					return
				case id == 2 && resp.TTL != 0:
					t.Errorf("stream %d: lease not found answered TTL %d, want 0", i, resp.TTL)
					return
				case id == 1 && resp.TTL <= asked:
					t.Errorf("stream %d, round %d: answered TTL %d, from the member's request #%d, but the member had received %d requests before the client asked",
						i, r, resp.TTL, resp.TTL, asked)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := m.streams.Load(); got != 1 {
		t.Errorf("the member held %d keep-alive streams for %d local ones, want 1", got, n)
	}
}
