package tests

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// reachOf returns each member's reachability in nd's member list.
func reachOf(t *testing.T, nd *servertest.Node) map[uint64]*dkvpb.Reachability {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ml, err := nd.Cluster.MemberList(ctx, &dkvpb.MemberListRequest{})
	if err != nil {
		t.Fatalf("member list on %s: %v", nd.Name, err)
	}
	out := map[uint64]*dkvpb.Reachability{}
	for _, m := range ml.GetMembers() {
		out[m.GetId()] = m.GetReachability()
	}
	return out
}

// A stopped member is not listed as if it were fine: the leader reports
// it unreachable (with how long ago it last heard from it), the live ones
// reachable, and itself as self; a follower knows the leader but not the
// other follower. After a restart it is reachable again.
func TestMemberListShowsReachability(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	lead := c.WaitLeader()
	fs := c.Followers()
	live, dead := fs[0], fs[1]

	c.Eventually(10*time.Second, "the leader hears from both followers", func() bool {
		r := reachOf(t, lead)
		return r[lead.ID()].GetState() == dkvpb.Reachability_STATE_SELF &&
			r[live.ID()].GetState() == dkvpb.Reachability_STATE_REACHABLE &&
			r[dead.ID()].GetState() == dkvpb.Reachability_STATE_REACHABLE
	})
	fr := reachOf(t, live)
	if fr[live.ID()].GetState() != dkvpb.Reachability_STATE_SELF || fr[lead.ID()].GetState() != dkvpb.Reachability_STATE_REACHABLE {
		t.Errorf("a follower's view: %v", fr)
	}

	c.Stop(dead)
	c.Eventually(10*time.Second, "the leader reports the stopped member unreachable", func() bool {
		r := reachOf(t, lead)[dead.ID()]
		return r.GetState() == dkvpb.Reachability_STATE_UNREACHABLE && r.GetLastContactMs() > 0
	})
	if r := reachOf(t, lead)[live.ID()]; r.GetState() != dkvpb.Reachability_STATE_REACHABLE {
		t.Errorf("the live follower is %v", r)
	}
	// Followers exchange no messages: the live follower cannot tell.
	if r := reachOf(t, live)[dead.ID()]; r.GetState() != dkvpb.Reachability_STATE_UNKNOWN {
		t.Errorf("a follower's view of the other follower: %v, want unknown", r)
	}

	c.Start(dead)
	c.Eventually(20*time.Second, "the restarted member is reachable again", func() bool {
		return reachOf(t, lead)[dead.ID()].GetState() == dkvpb.Reachability_STATE_REACHABLE
	})
}
