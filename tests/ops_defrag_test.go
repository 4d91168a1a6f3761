package tests

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// 'dkv defrag' against every member of a 3-node cluster, one after the
// other (docs/operations.md, "Space"), while 4 clients keep writing: no
// write fails, and afterwards every member holds the same state (equal
// HashKV at one revision, equal lease and lock hash at one applied index)
// with every acknowledged write readable on it.
func TestDefragEveryMemberUnderWrites(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := c.WaitLeader()
	// Something for the defrag to drop: overwritten versions, compacted.
	for i := 0; i < 200; i++ {
		if _, err := leader.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("old"), Value: make([]byte, 4<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := leader.Cluster.Status(ctx, &dkvpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.KV.Compact(ctx, &dkvpb.CompactRequest{Revision: st.GetRevision()}); err != nil {
		t.Fatal(err)
	}

	stop := steadyWrites(t, leader, 4)
	for _, nd := range c.Nodes {
		resp, err := dkvpb.NewMaintenanceClient(mustConn(t, nd)).Defragment(ctx, &dkvpb.DefragmentRequest{})
		if err != nil {
			stop()
			t.Fatalf("defrag %s: %v", nd.Name, err)
		}
		t.Logf("defrag %s: db size %d -> %d in %d ms", nd.Name, resp.GetDbSizeBefore(), resp.GetDbSizeAfter(), resp.GetTookMs())
	}
	acked, errs, last := stop()
	if len(errs) > 0 {
		t.Errorf("%d of %d puts failed during the defrags; first: %v", len(errs), int64(len(errs))+acked, errs[0])
	}
	if acked == 0 {
		t.Fatal("no put acknowledged during the defrags")
	}
	t.Logf("%d puts acknowledged during the defrags", acked)

	c.WaitConverged()
	var rev int64
	for _, nd := range c.Nodes {
		st, err := nd.Cluster.Status(ctx, &dkvpb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if rev == 0 || st.GetRevision() < rev {
			rev = st.GetRevision()
		}
	}
	var first *dkvpb.HashKVResponse
	for _, nd := range c.Nodes {
		h, err := nd.Cluster.HashKV(ctx, &dkvpb.HashKVRequest{Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = h
			continue
		}
		if h.GetHash() != first.GetHash() {
			t.Errorf("HashKV at revision %d: %s %016x, %s %016x", rev, c.Nodes[0].Name, first.GetHash(), nd.Name, h.GetHash())
		}
		if h.GetAppliedIndex() == first.GetAppliedIndex() && h.GetStateHash() != first.GetStateHash() {
			t.Errorf("lease and lock hash at applied index %d differs on %s", h.GetAppliedIndex(), nd.Name)
		}
	}
	// Every key's last acknowledged value is there on every member.
	for _, nd := range c.Nodes {
		for k, v := range last {
			r, err := nd.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte(k), Revision: rev})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.GetKvs()) != 1 || string(r.GetKvs()[0].GetValue()) != v {
				t.Errorf("%s at revision %d: %s = %v, want %q (acknowledged)", nd.Name, rev, k, r.GetKvs(), v)
				break
			}
		}
	}
}
