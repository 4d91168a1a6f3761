package tests

import (
	"testing"

	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestStopHandsLeadershipOver: server.Stop on the leader of an embedded
// cluster moves leadership to another member before it returns, so the
// cluster is never without a leader (without the hand-over the others
// notice the silence only after their election timeout, here a second).
func TestStopHandsLeadershipOver(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{ElectionTicks: 50})
	l := c.WaitLeader()
	c.Stop(l)
	var leaders []string
	for _, nd := range c.Nodes {
		if nd.Srv != nil && nd.Srv.IsLeader() {
			leaders = append(leaders, nd.Name)
		}
	}
	if len(leaders) != 1 {
		t.Fatalf("when Stop of leader %s returned, the others led: %v, want one of them", l.Name, leaders)
	}
	// The new leader serves writes.
	c.WaitConverged()
}
