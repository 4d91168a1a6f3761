package tests

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// One follower's disk nearly full: its alarm, proposed through raft, makes
// every member refuse writes that add data (the leader would otherwise go
// on filling that follower's disk), deletes still work everywhere, and
// writes resume on every member once the follower has room again.
func TestNoSpaceAlarmIsClusterWide(t *testing.T) {
	fss := map[string]*storage.FaultFS{}
	c := servertest.NewClusterEach(t, 3, server.Config{SpaceCheckInterval: 20 * time.Millisecond, SpaceReserveBytes: 64 << 20, BallastBytes: -1},
		func(nd *servertest.Node) {
			fs := storage.NewFaultFS(nil)
			fs.Avail.Store(1 << 40)
			fss[nd.Name] = fs
			nd.Cfg.FS = fs
		})
	leader := c.WaitLeader()
	put(t, leader, "before", "1")
	full := c.Followers()[0]
	fss[full.Name].Avail.Store(8 << 20)

	putErr := func(nd *servertest.Node, key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := nd.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte(key), Value: []byte("x")})
		return err
	}
	c.Eventually(10*time.Second, "every member refuses puts with NoSpace", func() bool {
		for _, nd := range c.Nodes {
			if dkverr.CodeOf(putErr(nd, "during")) != dkverr.NoSpace {
				return false
			}
		}
		return true
	})
	// Puts that were refused are nowhere (those before the alarm took
	// effect, in the loop above, may have applied: different key).
	for _, nd := range c.Nodes {
		if err := putErr(nd, "refused"); dkverr.CodeOf(err) != dkverr.NoSpace {
			t.Fatalf("put on %s during the alarm: %v, want NoSpace", nd.Name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := leader.KV.DeleteRange(ctx, &dkvpb.DeleteRangeRequest{Key: []byte("before")}); err != nil {
		t.Fatalf("delete on the leader during the alarm: %v", err)
	}
	if v, ok := get(t, full, "refused", false); ok {
		t.Fatalf("a refused put is visible: %q", v)
	}

	fss[full.Name].Avail.Store(1 << 40)
	c.Eventually(10*time.Second, "writes resume on every member", func() bool {
		for _, nd := range c.Nodes {
			if putErr(nd, "after-"+nd.Name) != nil {
				return false
			}
		}
		return true
	})
	for _, nd := range c.Nodes {
		for _, other := range c.Nodes {
			if _, ok := get(t, nd, "after-"+other.Name, false); !ok {
				t.Fatalf("%s misses the write made on %s", nd.Name, other.Name)
			}
		}
	}
}
