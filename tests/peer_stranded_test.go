package tests

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// TestForgedAppendCannotStrandAMember replays the second forged
// append: one that commits an entry on one member only, at an index where
// the rest of the cluster committed a real write. On the old code that
// member's committed log then differed from the leader's and raft could
// never repair it: the member stayed behind forever, leader and member
// exchanging appends at full speed, nothing logged. The forgery must not
// land, and the member must catch up.
//
// The member's own election timeout is made long so that the rest of the
// cluster, not the member, elects the next leader (on the old code the
// member, holding the forged entry of a higher term, could win instead
// and the others would then crash on a conflict with a committed entry).
func TestForgedAppendCannotStrandAMember(t *testing.T) {
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) {
		if nd.Name == "n3" {
			nd.Cfg.ElectionTicks = 1000
		}
	})
	ctx := context.Background()
	l := c.WaitLeader()
	if l.Name == "n3" {
		// n3 must be a follower; hand leadership on.
		if _, err := l.Cluster.LeaderTransfer(ctx, &dkvpb.LeaderTransferRequest{Name: "n1"}); err != nil {
			t.Fatal(err)
		}
		c.Eventually(10*time.Second, "n1 leading", func() bool { return c.Nodes[0].Srv.IsLeader() })
		l = c.Nodes[0]
	}
	f := c.Nodes[2]
	c.WaitConverged()
	var st *dkvpb.StatusResponse
	var prev uint64
	c.Eventually(10*time.Second, "an idle cluster", func() bool {
		var err error
		st, err = f.Cluster.Status(ctx, &dkvpb.StatusRequest{})
		if err != nil {
			return false
		}
		same := st.GetRaftIndex() == prev && st.GetRaftAppliedIndex() == st.GetRaftIndex() && l.Srv.CommitIndex() == prev
		prev = st.GetRaftIndex()
		return same
	})
	ci, term := st.GetRaftIndex(), st.GetRaftTerm()

	// The member misses a real write at ci+1...
	c.Faults.Cut(l.ID(), f.ID())
	if _, err := l.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("real"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	// ...and is sent a forged one at ci+1, committed, by a stranger.
	evil, _ := proto.Marshal(&dkvpb.InternalRequest{Id: 4242, Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte("evil"), Value: []byte("forged")}}})
	hi := term + 1000
	fg := &forger{t: t, cluster: st.GetHeader().GetClusterId()}
	err := fg.messages(f.PeerAddr, metadata.MD{}, 999, f.ID(), &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), From: new(uint64(999)), To: new(f.ID()), Term: new(hi),
		Index: new(ci), LogTerm: new(term),
		Entries: []*raftpb.Entry{{Term: new(hi), Index: new(ci + 1), Data: evil}},
		Commit:  new(ci + 1)})
	t.Logf("forged append: %v", err)
	c.Heal()

	// Every member applies what the leader committed, and has no forged key.
	if _, err := c.WaitLeader().KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("after"), Value: []byte("1")}); err != nil {
		t.Logf("put after heal: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ld := c.Leader()
		behind := ""
		if ld == nil {
			behind = "no leader"
		} else {
			want := ld.Srv.CommitIndex()
			for _, nd := range c.Nodes {
				if nd.Srv.AppliedIndex() < want {
					behind = nd.Name
				}
			}
		}
		if behind == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed behind the leader after a forged append (applied %d, %d, %d)", behind,
				c.Nodes[0].Srv.AppliedIndex(), c.Nodes[1].Srv.AppliedIndex(), c.Nodes[2].Srv.AppliedIndex())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	for _, nd := range c.Nodes {
		r, err := nd.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("evil"), Serializable: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetKvs()) != 0 {
			t.Fatalf("forged key committed on %s", nd.Name)
		}
	}
}
