package etcdapi_test

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestElection: etcd's v3election service: the first candidate leads,
// Leader and Observe show it and what it proclaims, a second candidate
// waits until the leader resigns and then leads, Observe follows; a
// stale leader key cannot proclaim. Candidates' keys are clientv3
// concurrency's (name/<lease hex>, valued with the proposal).
func TestElection(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	ec := v3electionpb.NewElectionClient(n.conn)
	name := []byte("e1")

	_, err := ec.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "election: no leader" {
		t.Fatalf("leader of an empty election: %v", err)
	}

	obs, err := ec.Observe(ctx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}

	la, lb := grant(t, n, 30), grant(t, n, 30)
	a, err := ec.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: la, Value: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Leader.Key) != fmt.Sprintf("e1/%x", la) || a.Leader.Lease != la || a.Leader.Rev == 0 {
		t.Fatalf("leader key %v", a.Leader)
	}
	if o, err := obs.Recv(); err != nil || string(o.Kv.Value) != "v1" {
		t.Fatalf("observe the first leader: %v %v", o, err)
	}
	l, err := ec.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil || string(l.Kv.Value) != "v1" || string(l.Kv.Key) != string(a.Leader.Key) {
		t.Fatalf("leader: %v %v", l, err)
	}
	if _, err := ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: a.Leader, Value: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	if o, err := obs.Recv(); err != nil || string(o.Kv.Value) != "v2" {
		t.Fatalf("observe the proclamation: %v %v", o, err)
	}

	type res struct {
		r   *v3electionpb.CampaignResponse
		err error
	}
	bch := make(chan res, 1)
	go func() {
		r, err := ec.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: lb, Value: []byte("b")})
		bch <- res{r, err}
	}()
	waitQueued(t, n, fmt.Sprintf("e1/%x", lb))
	select {
	case r := <-bch:
		t.Fatalf("second candidate leads while the first does: %v %v", r.r, r.err)
	default:
	}
	if _, err := ec.Resign(ctx, &v3electionpb.ResignRequest{Leader: a.Leader}); err != nil {
		t.Fatal(err)
	}
	b := <-bch
	if b.err != nil || string(b.r.Leader.Key) != fmt.Sprintf("e1/%x", lb) {
		t.Fatalf("second candidate after the resignation: %v %v", b.r, b.err)
	}
	if o, err := obs.Recv(); err != nil || string(o.Kv.Value) != "b" {
		t.Fatalf("observe the next leader: %v %v", o, err)
	}
	_, err = ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: a.Leader, Value: []byte("stale")})
	if status.Convert(err).Message() != "election: not leader" {
		t.Fatalf("proclaim with a resigned leader key: %v", err)
	}
	_, err = ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Value: []byte("x")})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("proclaim without a leader key: %v", err)
	}
	// The leader's key is a plain key of the keyspace.
	r, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: b.r.Leader.Key})
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "b" || r.Kvs[0].Lease != lb {
		t.Fatalf("leader key in the KV: %v %v", r, err)
	}
}

// TestCampaignCanceled: a candidate whose campaign is canceled while it
// waits withdraws (its key is deleted), so it never leads later.
func TestCampaignCanceled(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	ec := v3electionpb.NewElectionClient(n.conn)
	la, lb := grant(t, n, 30), grant(t, n, 30)
	if _, err := ec.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("e"), Lease: la, Value: []byte("a")}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := ec.Campaign(cctx, &v3electionpb.CampaignRequest{Name: []byte("e"), Lease: lb, Value: []byte("b")})
		done <- err
	}()
	key := fmt.Sprintf("e/%x", lb)
	waitQueued(t, n, key)
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("canceled campaign: %v", err)
	}
	waitGone(t, n, key)
}

func waitGone(t *testing.T, n *node, key string) {
	t.Helper()
	c := &pollT{t: t}
	c.until(func() bool {
		r, err := n.kv.Range(ctxT(t), &etcdserverpb.RangeRequest{Key: []byte(key)})
		return err == nil && len(r.Kvs) == 0
	}, "key "+key+" to be deleted")
}
