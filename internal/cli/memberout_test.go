package cli

import (
	"context"
	"net"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestLeaderViewAtAnEndpoint: a follower answered the member list and
// the leader's advertised client URL does not resolve here, as the names
// of a compose network do not on the host, but the leader is one of
// --endpoints: member list shows the leader's view (every member's
// reachability), not the follower's.
func TestLeaderViewAtAnEndpoint(t *testing.T) {
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) {
		_, port, _ := net.SplitHostPort(nd.Cfg.ClientAddr)
		nd.Cfg.AdvertiseClientAddr = net.JoinHostPort(nd.Name+".invalid", port)
	})
	lead := c.WaitLeader()
	f := c.Followers()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ml *dkvpb.MemberListResponse
	c.Eventually(10*time.Second, "the follower lists the leader's advertised client URL", func() bool {
		var err error
		if ml, err = f.Cluster.MemberList(ctx, &dkvpb.MemberListRequest{}); err != nil || ml.GetLeaderId() != lead.ID() {
			return false
		}
		for _, m := range ml.GetMembers() {
			if m.GetId() == lead.ID() {
				return m.GetClientUrl() == lead.Name+".invalid:"+port(t, lead.Srv.ClientAddr())
			}
		}
		return false
	})

	a := &App{endpoints: f.Srv.ClientAddr() + "," + lead.Srv.ClientAddr(), timeout: 5 * time.Second}
	if got := a.leaderView(ctx, ml).GetHeader().GetMemberId(); got != lead.ID() {
		t.Errorf("member list shows the view of member %x, want the leader's (%x), reachable at --endpoints %s", got, lead.ID(), a.endpoints)
	}
	// Without the leader among them, the follower's view is all there is.
	a.endpoints = f.Srv.ClientAddr()
	if got := a.leaderView(ctx, ml); got != ml {
		t.Errorf("with only the follower at --endpoints, member list shows the view of member %x, want the follower's own", got.GetHeader().GetMemberId())
	}
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
