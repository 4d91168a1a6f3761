package etcdapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TestThreeMembers: etcd's API works on every member of a cluster: a
// write through a follower is forwarded and acknowledged with its
// revision, read through another follower, seen by a watch on the
// leader; a lease granted through one follower is kept alive through
// another.
func TestThreeMembers(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{TickInterval: 10 * time.Millisecond, NoSync: true})
	leader := c.WaitLeader()
	fs := c.Followers()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(nd *servertest.Node) *grpc.ClientConn {
		conn, err := nd.Srv.DialInProcess(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	lc, f0, f1 := dial(leader), dial(fs[0]), dial(fs[1])

	ws, err := etcdserverpb.NewWatchClient(lc).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(createReq(&etcdserverpb.WatchCreateRequest{Key: []byte("k")})); err != nil {
		t.Fatal(err)
	}
	if r, err := ws.Recv(); err != nil || !r.Created {
		t.Fatalf("watch: %v %v", r, err)
	}

	g, err := etcdserverpb.NewLeaseClient(f0).LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	p, err := etcdserverpb.NewKVClient(f0).Put(ctx, &etcdserverpb.PutRequest{Key: []byte("k"), Value: []byte("v"), Lease: g.ID})
	if err != nil {
		t.Fatalf("put through a follower: %v", err)
	}
	if p.Header.MemberId != fs[0].ID() {
		t.Fatalf("put answered by member %x, want the follower %x", p.Header.MemberId, fs[0].ID())
	}
	r, err := etcdserverpb.NewKVClient(f1).Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("k")})
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].ModRevision != p.Header.Revision || r.Kvs[0].Lease != g.ID || r.Header.Revision < p.Header.Revision {
		t.Fatalf("linearizable read through the other follower: %v %v", r, err)
	}
	wr, err := ws.Recv()
	if err != nil || len(wr.Events) != 1 || wr.Events[0].Kv.ModRevision != p.Header.Revision {
		t.Fatalf("watch on the leader: %v %v", wr, err)
	}
	ka, err := etcdserverpb.NewLeaseClient(f1).LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
		t.Fatal(err)
	}
	if kr, err := ka.Recv(); err != nil || kr.ID != g.ID || kr.TTL != 30 {
		t.Fatalf("keep-alive through the other follower: %v %v", kr, err)
	}
}

// TestRequireLeader: a call carrying etcd's "hasleader" metadata (what
// clientv3.WithRequireLeader and etcdctl watch send) is refused with
// etcd's no-leader error by a member that knows no leader.
func TestRequireLeader(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{TickInterval: 10 * time.Millisecond, NoSync: true})
	c.WaitLeader()
	lone := c.Followers()[0]
	for _, nd := range c.Nodes {
		if nd != lone {
			c.Stop(nd)
		}
	}
	c.Eventually(10*time.Second, "the lone member to lose its leader", func() bool { return lone.Srv.LeaderID() == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := lone.Srv.DialInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := metadata.AppendToOutgoingContext(ctx, rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)
	_, err = etcdserverpb.NewKVClient(conn).Range(req, &etcdserverpb.RangeRequest{Key: []byte("k")})
	isErr(t, err, rpctypes.ErrGRPCNoLeader)
	ws, err := etcdserverpb.NewWatchClient(conn).Watch(req)
	if err == nil {
		_, err = ws.Recv()
	}
	isErr(t, err, rpctypes.ErrGRPCNoLeader)
	// Without the metadata a serializable read is still served locally.
	if _, err := etcdserverpb.NewKVClient(conn).Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("k"), Serializable: true}); err != nil {
		t.Fatalf("serializable read without a leader: %v", err)
	}
}
