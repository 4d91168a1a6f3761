package etcdcompat

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/status"
)

// TestLockElectionServices drives etcd's v3lock and v3election gRPC
// services (which etcdctl's lock and elect do not use: they run clientv3's
// concurrency package over KV) through their generated clients.
func TestLockElectionServices(t *testing.T) {
	c := startCluster(t, target(t))
	cli := c.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	grant := func() clientv3.LeaseID {
		t.Helper()
		g, err := cli.Grant(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	errMessage := func(err error) string { return status.Convert(err).Message() }

	t.Run("Lock", func(t *testing.T) {
		lk := v3lockpb.NewLockClient(cli.ActiveConnection())
		l1, l2, l3 := grant(), grant(), grant()
		r1, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("svc-lock"), Lease: int64(l1)})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(r1.Key), "svc-lock/") || r1.Header == nil || r1.Header.Revision == 0 {
			t.Fatalf("Lock response %+v", r1)
		}
		g, err := cli.Get(ctx, string(r1.Key))
		if err != nil || len(g.Kvs) != 1 || g.Kvs[0].Lease != int64(l1) {
			t.Fatalf("lock key %s: %+v, %v", r1.Key, g, err)
		}
		type res struct {
			r   *v3lockpb.LockResponse
			err error
		}
		second := make(chan res, 1)
		go func() {
			r, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("svc-lock"), Lease: int64(l2)})
			second <- res{r, err}
		}()
		waitKeys(t, cli, "svc-lock/", 2)
		notYet(t, "Lock of a held lock", second)
		if _, err := lk.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r1.Key}); err != nil {
			t.Fatal(err)
		}
		r2 := within(t, 20*time.Second, "Lock after Unlock", second)
		if r2.err != nil || !strings.HasPrefix(string(r2.r.Key), "svc-lock/") || string(r2.r.Key) == string(r1.Key) {
			t.Fatalf("second Lock: %+v, %v", r2.r, r2.err)
		}
		// Revoking the holder's lease releases the lock.
		third := make(chan res, 1)
		go func() {
			r, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("svc-lock"), Lease: int64(l3)})
			third <- res{r, err}
		}()
		waitKeys(t, cli, "svc-lock/", 2)
		notYet(t, "Lock of a held lock", third)
		if _, err := cli.Revoke(ctx, l2); err != nil {
			t.Fatal(err)
		}
		if r3 := within(t, 20*time.Second, "Lock after the holder's lease was revoked", third); r3.err != nil {
			t.Fatal(r3.err)
		}
		// A lease that does not exist is refused.
		_, err = lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("svc-lock2"), Lease: int64(l2)})
		if err == nil || errMessage(err) != "etcdserver: requested lease not found" {
			t.Fatalf("Lock on a revoked lease: %v", err)
		}
	})

	t.Run("Election", func(t *testing.T) {
		el := v3electionpb.NewElectionClient(cli.ActiveConnection())
		name := []byte("svc-election")
		_, err := el.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
		if err == nil || errMessage(err) != "election: no leader" {
			t.Fatalf("Leader of an empty election: %v, want \"election: no leader\"", err)
		}
		l1, l2 := grant(), grant()
		c1, err := el.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: int64(l1), Value: []byte("a")})
		if err != nil {
			t.Fatal(err)
		}
		lead := c1.Leader
		if lead == nil || string(lead.Name) != string(name) || lead.Lease != int64(l1) || lead.Rev == 0 || !strings.HasPrefix(string(lead.Key), string(name)+"/") {
			t.Fatalf("Campaign leader key %+v", lead)
		}
		lr, err := el.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
		if err != nil || string(lr.Kv.Value) != "a" || string(lr.Kv.Key) != string(lead.Key) {
			t.Fatalf("Leader: %+v, %v", lr, err)
		}
		octx, ocancel := context.WithCancel(ctx)
		defer ocancel()
		obs, err := el.Observe(octx, &v3electionpb.LeaderRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		observed := make(chan string, 16)
		go func() {
			for {
				r, err := obs.Recv()
				if err != nil {
					close(observed)
					return
				}
				observed <- string(r.Kv.Value)
			}
		}()
		expect := func(want string) {
			t.Helper()
			deadline := time.After(20 * time.Second)
			for {
				select {
				case v, ok := <-observed:
					if !ok {
						t.Fatalf("Observe ended while waiting for %q", want)
					}
					if v == want {
						return
					}
				case <-deadline:
					t.Fatalf("Observe did not show %q", want)
				}
			}
		}
		expect("a")
		if _, err := el.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: lead, Value: []byte("b")}); err != nil {
			t.Fatal(err)
		}
		expect("b")
		type res struct {
			r   *v3electionpb.CampaignResponse
			err error
		}
		second := make(chan res, 1)
		go func() {
			r, err := el.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: int64(l2), Value: []byte("c")})
			second <- res{r, err}
		}()
		waitKeys(t, cli, string(name)+"/", 2)
		notYet(t, "Campaign against a leader", second)
		if _, err := el.Resign(ctx, &v3electionpb.ResignRequest{Leader: lead}); err != nil {
			t.Fatal(err)
		}
		r2 := within(t, 20*time.Second, "Campaign after Resign", second)
		if r2.err != nil || r2.r.Leader.Lease != int64(l2) {
			t.Fatalf("second Campaign: %+v, %v", r2.r, r2.err)
		}
		expect("c")
		// The resigned leader's key no longer leads.
		_, err = el.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: lead, Value: []byte("stale")})
		if err == nil || errMessage(err) != "election: not leader" {
			t.Fatalf("Proclaim by a resigned leader: %v, want \"election: not leader\"", err)
		}
		_, err = el.Proclaim(ctx, &v3electionpb.ProclaimRequest{Value: []byte("x")})
		if err == nil || errMessage(err) != `"leader" field must be provided` {
			t.Fatalf("Proclaim without a leader key: %v", err)
		}
	})
}
