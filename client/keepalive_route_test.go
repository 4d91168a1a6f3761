package client_test

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// A client given every member opens its lease keep-alive stream on the
// leader once it knows it, so the followers propose none of the renewals.
// Several clients, each with its own stream: spread round-robin as
// before, the chance that every stream lands on the leader is (1/3)^6.
func TestKeepAliveStreamGoesToTheLeader(t *testing.T) {
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) { nd.Cfg.HTTPAddr = testutil.FreeAddr(t) })
	c.WaitLeader()
	var eps []string
	for _, nd := range c.Nodes {
		eps = append(eps, nd.Srv.ClientAddr())
	}
	// Each member proposes its client URL once ready: wait for those, so
	// that the proposals counted below are the renewals.
	c.Eventually(20*time.Second, "every member's client URL in the member list", func() bool {
		ml, err := c.Nodes[0].Cluster.MemberList(context.Background(), &dkvpb.MemberListRequest{Linearizable: true})
		if err != nil || len(ml.GetMembers()) != 3 {
			return false
		}
		for _, m := range ml.GetMembers() {
			if m.GetClientUrl() == "" {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var clients []*client.Client
	for range 6 {
		cl, err := client.New(ctx, client.Config{Endpoints: eps, AutoSyncInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		// Busy, the client probes the members and learns the leader.
		testutil.Eventually(t, 20*time.Second, "the client to learn the leader", func() bool {
			if _, err := cl.Put(ctx, "warm", []byte("x")); err != nil {
				t.Fatal(err)
			}
			return client.LeaderKnown(cl)
		})
		clients = append(clients, cl)
	}
	before := map[string]float64{}
	for _, nd := range c.Nodes {
		before[nd.Name] = nd.Metric(t, "dkv_proposals_total")
	}
	for _, cl := range clients {
		g, err := cl.Grant(ctx, 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.KeepAlive(ctx, g.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Each stream renews its lease at once and then every 500ms: wait for
	// the grants and a few rounds of renewals, wherever they are proposed.
	testutil.Eventually(t, 20*time.Second, "renewals", func() bool {
		var n float64
		for _, nd := range c.Nodes {
			n += nd.Metric(t, "dkv_proposals_total") - before[nd.Name]
		}
		return n >= 6+3*6
	})
	for _, nd := range c.Followers() {
		if n := nd.Metric(t, "dkv_proposals_total") - before[nd.Name]; n != 0 {
			t.Errorf("follower %s made %v proposals: keep-alive renewals went through it", nd.Name, n)
		}
	}
}
