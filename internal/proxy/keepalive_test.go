package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
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
