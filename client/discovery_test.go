package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// Naming one member is enough: the client discovers the others and keeps
// working when the named one goes away.
func TestClientDiscoversMembersAndSurvivesLossOfSeed(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	seed := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Members publish their client URLs once ready.
	c.Eventually(10*time.Second, "every member's client URL published", func() bool {
		resp, err := seed.Cluster.MemberList(ctx, &dkvpb.MemberListRequest{})
		if err != nil {
			return false
		}
		for _, m := range resp.Members {
			if m.ClientUrl == "" {
				return false
			}
		}
		return true
	})
	cl, err := client.New(ctx, client.Config{Endpoints: []string{seed.Cfg.ClientAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Discovery runs in the background.
	c.Eventually(10*time.Second, "every member discovered", func() bool {
		eps := cl.Endpoints()
		for _, nd := range c.Nodes {
			if !slices.Contains(eps, nd.Cfg.ClientAddr) {
				return false
			}
		}
		return true
	})
	if _, err := cl.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	c.Stop(seed)
	c.WaitLeader()
	// Reads and writes reach the remaining members.
	if _, err := cl.Put(ctx, "k", []byte("v2")); err != nil {
		t.Fatalf("put after seed loss: %v", err)
	}
	kv, err := cl.Get(ctx, "k")
	if err != nil || string(kv.Value) != "v2" {
		t.Fatalf("get after seed loss: %v %v", kv, err)
	}
}
