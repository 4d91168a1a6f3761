package etcdapi_test

import (
	"context"
	"io"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestLease(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	g, err := n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 30})
	if err != nil || g.ID <= 0 || g.TTL != 30 || g.Header.MemberId == 0 {
		t.Fatalf("grant: %v %v", g, err)
	}
	chosen, err := n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 30, ID: 777})
	if err != nil || chosen.ID != 777 {
		t.Fatalf("grant with an id: %v %v", chosen, err)
	}
	_, err = n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 30, ID: 777})
	isErr(t, err, rpctypes.ErrGRPCLeaseExist)
	_, err = n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 1 << 40})
	isErr(t, err, rpctypes.ErrGRPCLeaseTTLTooLarge)

	for _, k := range []string{"s/1", "s/2"} {
		if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte(k), Value: []byte("x"), Lease: g.ID}); err != nil {
			t.Fatal(err)
		}
	}
	ttl, err := n.l.LeaseTimeToLive(ctx, &etcdserverpb.LeaseTimeToLiveRequest{ID: g.ID, Keys: true})
	if err != nil || ttl.ID != g.ID || ttl.GrantedTTL != 30 || ttl.TTL <= 0 || ttl.TTL > 30 ||
		len(ttl.Keys) != 2 || string(ttl.Keys[0]) != "s/1" || string(ttl.Keys[1]) != "s/2" {
		t.Fatalf("time to live: %v %v", ttl, err)
	}

	ka, err := n.l.LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, ttl int64 }{{g.ID, 30}, {777, 30}, {424242, 0}} {
		if err := ka.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: tc.id}); err != nil {
			t.Fatal(err)
		}
		r, err := ka.Recv()
		if err != nil || r.ID != tc.id || r.TTL != tc.ttl || r.Header.GetRevision() == 0 {
			t.Fatalf("keep-alive of %d: %v %v, want TTL %d", tc.id, r, err, tc.ttl)
		}
	}
	if err := ka.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// A lease granted through DKV's API is listed, and both through etcd's.
	dl, err := dkvpb.NewLeaseClient(n.conn).Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := n.l.LeaseLeases(ctx, &etcdserverpb.LeaseLeasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int64]bool{}
	for _, l := range ls.Leases {
		ids[l.ID] = true
	}
	if len(ids) != 3 || !ids[g.ID] || !ids[777] || !ids[dl.Id] {
		t.Fatalf("leases %v, want %d, 777, %d", ls.Leases, g.ID, dl.Id)
	}

	rv, err := n.l.LeaseRevoke(ctx, &etcdserverpb.LeaseRevokeRequest{ID: g.ID})
	if err != nil || rv.Header.Revision == 0 {
		t.Fatalf("revoke: %v %v", rv, err)
	}
	r, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("s/"), RangeEnd: []byte("s0")})
	if err != nil || len(r.Kvs) != 0 || r.Header.Revision != rv.Header.Revision {
		t.Fatalf("keys after revoke: %v %v", r, err)
	}
	ttl, err = n.l.LeaseTimeToLive(ctx, &etcdserverpb.LeaseTimeToLiveRequest{ID: g.ID})
	if err != nil || ttl.TTL != -1 || ttl.ID != g.ID {
		t.Fatalf("time to live of a revoked lease: %v %v (etcd answers TTL -1)", ttl, err)
	}
	_, err = n.l.LeaseRevoke(ctx, &etcdserverpb.LeaseRevokeRequest{ID: g.ID})
	isErr(t, err, rpctypes.ErrGRPCLeaseNotFound)
}

// TestKeepAliveMany: one stream keeping many leases alive (as clientv3
// does) gets one answer per request, in any order.
func TestKeepAliveMany(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	want := map[int64]int{}
	for i := 0; i < 50; i++ {
		g, err := n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 30})
		if err != nil {
			t.Fatal(err)
		}
		want[g.ID] = 2
	}
	ka, err := n.l.LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		for id := range want {
			if err := ka.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ka.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2*len(want); i++ {
		r, err := ka.Recv()
		if err != nil {
			t.Fatalf("after %d answers: %v", i, err)
		}
		if want[r.ID] == 0 || r.TTL != 30 {
			t.Fatalf("unexpected answer %v", r)
		}
		want[r.ID]--
	}
	if _, err := ka.Recv(); err != io.EOF {
		t.Fatalf("after every answer: %v, want the stream's end", err)
	}
}

// BenchmarkKeepAliveBurst: b.N keep-alives of 100 leases sent at once on
// one stream, then every answer received.
func BenchmarkKeepAliveBurst(b *testing.B) {
	n := startNodeB(b)
	ctx := context.Background()
	var ids []int64
	for i := 0; i < 100; i++ {
		g, err := n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 60})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, g.ID)
	}
	ka, err := n.l.LeaseKeepAlive(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if err := ka.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: ids[i%len(ids)]}); err != nil {
				return
			}
		}
	}()
	for i := 0; i < b.N; i++ {
		if _, err := ka.Recv(); err != nil {
			b.Fatal(err)
		}
	}
}
