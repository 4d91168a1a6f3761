package etcdapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMembers: etcd's Cluster service on a three-member cluster, called
// through a follower: the list with uint64 ids and URLs, a learner added
// by peer URL, promoting it before it caught up, removing it, and etcd's
// errors for unknown ids, voters and duplicate URLs; MoveLeader moves
// leadership to the member named.
func TestMembers(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{TickInterval: 10 * time.Millisecond, NoSync: true})
	leader := c.WaitLeader()
	f := c.Followers()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := f.Srv.DialInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := etcdserverpb.NewClusterClient(conn)

	var l *etcdserverpb.MemberListResponse
	c.Eventually(10*time.Second, "every member to publish its client URL", func() bool {
		l, err = cl.MemberList(ctx, &etcdserverpb.MemberListRequest{Linearizable: true})
		if err != nil || len(l.Members) != 3 {
			return false
		}
		for _, m := range l.Members {
			if len(m.ClientURLs) != 1 {
				return false
			}
		}
		return true
	})
	ids := map[uint64]bool{}
	for _, nd := range c.Nodes {
		ids[nd.ID()] = true
	}
	for _, m := range l.Members {
		if !ids[m.ID] || m.Name == "" || m.IsLearner || len(m.PeerURLs) != 1 || !strings.HasPrefix(m.PeerURLs[0], "http://") ||
			!strings.HasPrefix(m.ClientURLs[0], "http://") {
			t.Fatalf("member %v", m)
		}
	}
	if l.Header.MemberId != f.ID() || l.Header.ClusterId == 0 {
		t.Fatalf("header %v", l.Header)
	}

	add, err := cl.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:1"}, IsLearner: true})
	if err != nil {
		t.Fatal(err)
	}
	if add.Member.ID != server.MemberID("127.0.0.1:1", "127.0.0.1:1") || !add.Member.IsLearner || len(add.Members) != 4 {
		t.Fatalf("added %v of %v", add.Member, add.Members)
	}
	_, err = cl.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{"127.0.0.1:1"}})
	isErr(t, err, rpctypes.ErrGRPCPeerURLExist)
	_, err = cl.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{"http://a:1", "http://b:2"}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("two peer URLs: %v", err)
	}
	_, err = cl.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{"no port"}})
	isErr(t, err, rpctypes.ErrGRPCMemberBadURLs)
	// Not started yet, as etcd shows it: no name, no client URL (etcdctl
	// member list prints "unstarted" for an empty name).
	l, err = cl.MemberList(ctx, &etcdserverpb.MemberListRequest{Linearizable: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range l.Members {
		if m.ID == add.Member.ID && (m.Name != "" || len(m.ClientURLs) != 0) {
			t.Fatalf("unstarted learner listed as %v, want no name and no client URL", m)
		}
	}

	// Nothing runs at the learner's address: it cannot have caught up.
	_, err = cl.MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: add.Member.ID})
	isErr(t, err, rpctypes.ErrGRPCLearnerNotReady)
	_, err = cl.MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: f.ID()})
	isErr(t, err, rpctypes.ErrGRPCMemberNotLearner)
	_, err = cl.MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: 42})
	isErr(t, err, rpctypes.ErrGRPCMemberNotFound)

	// Updating to the same URL is accepted; a member that has not
	// started cannot move (it joins under the id its name and peer URL
	// derive); nor can a member move to another member's address.
	if _, err := cl.MemberUpdate(ctx, &etcdserverpb.MemberUpdateRequest{ID: add.Member.ID, PeerURLs: []string{"http://127.0.0.1:1"}}); err != nil {
		t.Fatalf("update to the same URL: %v", err)
	}
	_, err = cl.MemberUpdate(ctx, &etcdserverpb.MemberUpdateRequest{ID: add.Member.ID, PeerURLs: []string{"http://127.0.0.1:2"}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "has not started") {
		t.Fatalf("update of an unstarted member to another URL: %v", err)
	}
	_, err = cl.MemberUpdate(ctx, &etcdserverpb.MemberUpdateRequest{ID: f.ID(), PeerURLs: []string{"http://127.0.0.1:1"}})
	isErr(t, err, rpctypes.ErrGRPCPeerURLExist)
	_, err = cl.MemberUpdate(ctx, &etcdserverpb.MemberUpdateRequest{ID: 42, PeerURLs: []string{"http://127.0.0.1:3"}})
	isErr(t, err, rpctypes.ErrGRPCMemberNotFound)

	rm, err := cl.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: add.Member.ID})
	if err != nil || len(rm.Members) != 3 {
		t.Fatalf("remove the learner: %v %v", rm, err)
	}
	_, err = cl.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: add.Member.ID})
	isErr(t, err, rpctypes.ErrGRPCMemberNotFound)

	// MoveLeader to the other follower, asked of this follower.
	to := c.Followers()[1]
	if to == f {
		to = c.Followers()[0]
	}
	m := etcdserverpb.NewMaintenanceClient(conn)
	if _, err := m.MoveLeader(ctx, &etcdserverpb.MoveLeaderRequest{TargetID: to.ID()}); err != nil {
		t.Fatal(err)
	}
	c.Eventually(10*time.Second, "the leadership to move", func() bool { return leader.Srv.LeaderID() == to.ID() })
	_, err = m.MoveLeader(ctx, &etcdserverpb.MoveLeaderRequest{TargetID: 42})
	isErr(t, err, rpctypes.ErrGRPCBadLeaderTransferee)
}
