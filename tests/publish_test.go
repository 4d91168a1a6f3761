package tests

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/raft/v3/raftpb"
)

// TestLostPublishIsRetried: a member that restarts on a new client
// address publishes it through raft. If that proposal is lost on its way
// to the leader, the member must try again: unpublished, it cannot be
// forwarded to once it leads (a membership call through another member
// fails with "no leader with a known client URL"), and clients
// discovering members never learn its address. Seen as
// TestMembershipChangesUnderLoad failing in CI.
func TestLostPublishIsRetried(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	c.WaitConverged()
	l := c.WaitLeader()
	f := c.Followers()[0]
	c.Stop(f)
	f.Cfg.ClientAddr = testutil.FreeAddr(t)
	c.Faults.DropType(f.ID(), raftpb.MsgProp) // its heartbeats and reads still pass
	c.Start(f)
	c.Eventually(30*time.Second, "the restarted member's publish proposal to be lost", func() bool {
		return c.Faults.TypeDropped(f.ID(), raftpb.MsgProp) > 0
	})
	c.Heal()
	want := f.Srv.AdvertisedClientAddr()
	c.Eventually(30*time.Second, "the member table to show "+f.Name+"'s new client URL "+want, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		list, err := l.Cluster.MemberList(ctx, &dkvpb.MemberListRequest{Linearizable: true})
		if err != nil {
			return false
		}
		for _, m := range list.Members {
			if m.GetName() == f.Name {
				return m.GetClientUrl() == want
			}
		}
		return false
	})
}
