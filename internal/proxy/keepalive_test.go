package proxy_test

import (
	"context"
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
