package bench

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

func threeNodes(t *testing.T) (*servertest.Cluster, []string) {
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) { nd.Cfg.HTTPAddr = testutil.FreeAddr(t) })
	var eps []string
	for _, nd := range c.Nodes {
		eps = append(eps, nd.Srv.ClientAddr())
	}
	settled(t, c)
	return c, eps
}

// settled waits for every member's own start-up proposal (it publishes
// its client URL once ready) to be applied, so that the proposals counted
// afterwards are the test's.
func settled(t *testing.T, c *servertest.Cluster) {
	c.Eventually(20*time.Second, "every member's client URL in the member list", func() bool {
		ml, err := c.Nodes[0].Cluster.MemberList(t.Context(), &dkvpb.MemberListRequest{Linearizable: true})
		if err != nil || len(ml.GetMembers()) != len(c.Nodes) {
			return false
		}
		for _, m := range ml.GetMembers() {
			if m.GetClientUrl() == "" {
				return false
			}
		}
		return true
	})
}

func followerProposals(t *testing.T, c *servertest.Cluster) map[string]float64 {
	m := map[string]float64{}
	for _, nd := range c.Followers() {
		m[nd.Name] = nd.Metric(t, "dkv_proposals_total")
	}
	return m
}

// With --route leader every write of a run (the puts, and the lease
// grants, keep-alive streams and revokes of lease-keepalive) goes to the
// leader: no follower makes a proposal. With --route spread the followers
// do, forwarding the writes that reach them.
func TestRouteLeaderSendsWritesToTheLeader(t *testing.T) {
	c, eps := threeNodes(t)
	leader := c.WaitLeader()
	for _, wl := range []string{"put", "lease-keepalive"} {
		for _, route := range []string{RouteLeader, RouteSpread} {
			before := followerProposals(t, c)
			var warn bytes.Buffer
			res := run(t, Options{Workload: wl, Route: route, Endpoints: eps, Clients: 6, Conns: 6, Total: 300, Keys: 30, Warn: &warn})
			if res.OK != 300 {
				t.Fatalf("%s %s: ok=%d errors=%v", wl, route, res.OK, res.Errors)
			}
			if res.Route != route || warn.Len() != 0 {
				t.Fatalf("%s %s: result route %q, warnings %q", wl, route, res.Route, warn.String())
			}
			after := followerProposals(t, c)
			var moved float64
			for name, n := range after {
				moved += n - before[name]
			}
			switch {
			case route == RouteLeader && moved != 0:
				t.Errorf("%s --route leader: followers made %v proposals (before %v, after %v)", wl, moved, before, after)
			case route == RouteLeader && res.Params["leader"] != leader.Srv.ClientAddr():
				t.Errorf("%s --route leader: leader %v recorded, want %s", wl, res.Params["leader"], leader.Srv.ClientAddr())
			case route == RouteSpread && moved == 0:
				t.Errorf("%s --route spread: no follower made a proposal; the test proves nothing", wl)
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(text.String(), "route: "+route+" (") {
				t.Errorf("text output does not start with the route: %q", text.String())
			}
		}
	}
}

// Given only a follower's address, --route leader finds the leader from
// the member list and still sends no write through the follower.
func TestRouteLeaderFromAFollowerEndpoint(t *testing.T) {
	c, _ := threeNodes(t)
	leader := c.WaitLeader()
	f := c.Followers()[0]
	before := f.Metric(t, "dkv_proposals_total")
	res := run(t, Options{Workload: "put", Endpoints: []string{f.Srv.ClientAddr()}, Clients: 4, Total: 100, Keys: 10})
	if res.OK != 100 || res.Route != RouteLeader || res.Params["leader"] != leader.Srv.AdvertisedClientAddr() {
		t.Fatalf("ok=%d route=%q leader=%v, want 100 through %s", res.OK, res.Route, res.Params["leader"], leader.Srv.AdvertisedClientAddr())
	}
	if n := f.Metric(t, "dkv_proposals_total") - before; n != 0 {
		t.Fatalf("the follower made %v proposals", n)
	}
}

// An unreachable endpoint does not stop the leader being found among the
// others; when no endpoint answers, the run falls back to spreading, says
// so on Warn and in the result, and does not fail.
func TestRouteLeaderFallsBackToSpread(t *testing.T) {
	// A dead endpoint alongside a live single node: the live one is found
	// as leader, the dead one does not get in the way.
	ep, _ := startServer(t)
	dead := deadEndpoint(t)
	var warn bytes.Buffer
	res := run(t, Options{Workload: "put", Endpoints: []string{dead, ep}, Clients: 2, Conns: 2, Total: 20, Keys: 5, Warn: &warn, OpTimeout: 2e9})
	if res.Route != RouteLeader || res.Params["leader"] != ep || res.OK != 20 {
		t.Fatalf("route %q leader %v ok=%d errors=%v; want every put through the leader %s", res.Route, res.Params["leader"], res.OK, res.Errors, ep)
	}
	// No endpoint answers: no leader, spread, and the ops fail as they
	// would have without routing (Unavailable), not the setup.
	warn.Reset()
	res = run(t, Options{Workload: "put", Endpoints: []string{dead}, Clients: 2, Total: 4, Warn: &warn, OpTimeout: 2e9})
	if res.Route != RouteSpread || res.Params["route_requested"] != RouteLeader || res.Errors["Unavailable"] != 4 {
		t.Fatalf("route %q params %v errors %v", res.Route, res.Params, res.Errors)
	}
	if !strings.Contains(warn.String(), "leader could not be found") || !strings.Contains(warn.String(), "spreading") {
		t.Fatalf("no fallback notice: %q", warn.String())
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "leader was asked for but the leader could not be found") {
		t.Fatalf("text output does not say the fallback: %q", text.String())
	}
}

// deadEndpoint is a loopback address nothing listens on.
func deadEndpoint(t *testing.T) string {
	s, err := server.New(server.Config{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ep := s.ClientAddr()
	s.Stop()
	return ep
}

// A run whose setup finds no leader because an election is under way
// (right after a cluster starts, or here, while two of three members are
// down) asks again until the election ends and routes writes to the
// leader. It used to spread them for the whole run at the first answer
// without a leader.
func TestRouteLeaderWaitsForAnElection(t *testing.T) {
	c, eps := threeNodes(t)
	n1 := c.Nodes[0]
	for _, nd := range c.Nodes[1:] {
		c.Stop(nd)
	}
	c.Eventually(20*time.Second, "n1 knowing no leader", func() bool {
		st, err := n1.Cluster.Status(t.Context(), &dkvpb.StatusRequest{})
		return err == nil && st.GetLeaderId() == 0
	})
	var dials atomic.Int32
	plain := func(ctx context.Context, ep string) (*grpc.ClientConn, error) {
		dials.Add(1)
		return grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	const conns = 2
	var warn bytes.Buffer
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() {
		res, err := Bench(ctx, Options{Workload: "put", Endpoints: eps[:1], Clients: 2, Conns: conns, Total: 20, Keys: 5, Warn: &warn, OpTimeout: 10 * time.Second, Dial: plain})
		done <- outcome{res, err}
	}()
	// The read connections, then one probe of n1 per question: a third
	// probe means the setup asked, heard of no leader, and asked again.
	c.Eventually(10*time.Second, "the setup asking again who leads", func() bool { return dials.Load() >= conns+3 })
	c.Start(c.Nodes[1])
	c.Start(c.Nodes[2])
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.res.Route != RouteLeader || o.res.OK != 20 {
		t.Fatalf("route %q ok=%d errors=%v, notice %q; want every put routed to the leader once elected", o.res.Route, o.res.OK, o.res.Errors, warn.String())
	}
}
