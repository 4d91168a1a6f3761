package etcdapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestMemberUpdateMovesAFollower: etcd's MemberUpdate, asked of the
// follower it moves, moves it to another peer address through raft. It keeps
// its id; restarted with the new --peer-addr and its data dir it rejoins,
// writes made after the move replicate to it, and MemberList (what
// etcdctl member list shows) gives the new URL on every member.
func TestMemberUpdateMovesAFollower(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{TickInterval: 10 * time.Millisecond, NoSync: true})
	leader := c.WaitLeader()
	f := c.Followers()[0]
	id := f.Srv.MemberID()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Asked of the member being moved: a follower forwards the change to
	// the leader, and must not wait for a read index it cannot get once
	// the others dial its new address.
	conn, err := f.Srv.DialInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl := etcdserverpb.NewClusterClient(conn)
	c.Eventually(10*time.Second, "every member to publish its client URL", func() bool {
		l, err := cl.MemberList(ctx, &etcdserverpb.MemberListRequest{Linearizable: true})
		if err != nil {
			return false
		}
		for _, m := range l.Members {
			if len(m.ClientURLs) != 1 {
				return false
			}
		}
		return len(l.Members) == 3
	})

	newPeer := testutil.FreeAddr(t)
	up, err := cl.MemberUpdate(ctx, &etcdserverpb.MemberUpdateRequest{ID: id, PeerURLs: []string{"http://" + newPeer}})
	if err != nil {
		t.Fatalf("member update: %v", err)
	}
	conn.Close()
	if got := peerOf(up.Members, id); got != "http://"+newPeer {
		t.Fatalf("update answered peer URL %q for the member, want http://%s", got, newPeer)
	}

	// Move it: stop, restart on the new address with the same data dir.
	// Its --initial-cluster entry names the new address too (a restart
	// with a data dir does not read the list, but the flags must agree).
	c.Stop(f)
	f.Cfg.PeerAddr = newPeer
	f.Cfg.InitialCluster = strings.Replace(f.Cfg.InitialCluster, f.Name+"="+f.PeerAddr, f.Name+"="+newPeer, 1)
	c.Start(f)
	if f.Srv.MemberID() != id {
		t.Fatalf("restarted member has id %x, want %x (kept from its data dir)", f.Srv.MemberID(), id)
	}

	// A write after the move reaches it: the leader dials its new address.
	if _, err := leader.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("after-move"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	c.Eventually(20*time.Second, "the write to replicate to the moved member", func() bool {
		r, err := f.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("after-move"), Serializable: true})
		return err == nil && len(r.GetKvs()) == 1 && string(r.GetKvs()[0].GetValue()) == "v"
	})
	// And it takes part in quorum: with the other follower stopped, the
	// leader still commits only with it.
	var other *servertest.Node
	for _, nd := range c.Followers() {
		if nd != f {
			other = nd
		}
	}
	if other != nil {
		c.Stop(other)
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := c.WaitLeader().KV.Put(wctx, &dkvpb.PutRequest{Key: []byte("quorum-with-moved"), Value: []byte("v")})
		wcancel()
		if err != nil {
			t.Fatalf("write with only the leader and the moved member up: %v", err)
		}
		c.Start(other)
	}

	// Every member lists the new URL for it.
	for _, nd := range c.Nodes {
		nconn, err := nd.Srv.DialInProcess(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Eventually(10*time.Second, nd.Name+" to list the new peer URL", func() bool {
			l, err := etcdserverpb.NewClusterClient(nconn).MemberList(ctx, &etcdserverpb.MemberListRequest{Linearizable: true})
			return err == nil && peerOf(l.Members, id) == "http://"+newPeer
		})
		nconn.Close()
	}
}

func peerOf(ms []*etcdserverpb.Member, id uint64) string {
	for _, m := range ms {
		if m.ID == id && len(m.PeerURLs) == 1 {
			return m.PeerURLs[0]
		}
	}
	return ""
}
