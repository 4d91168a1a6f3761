package tests

import (
	"context"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestLockWaitKeepsPlaceAcrossRestartAndLeaderChange: a waiter whose
// member restarts, and whose cluster then changes leader, keeps its FIFO
// place: it is granted the lock before a waiter that queued after it.
func TestLockWaitKeepsPlaceAcrossRestartAndLeaderChange(t *testing.T) {
	c3 := newLeaseCluster(t, 3)
	lead := c3.WaitLeader()
	var fs []*servertest.Node
	for _, nd := range c3.Nodes {
		if nd != lead {
			fs = append(fs, nd)
		}
	}
	all := servertest.Client(t, c3.Nodes...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const key = "standby"
	held, err := all.TryAcquire(ctx, key, time.Minute)
	if err != nil || !held.Acquired {
		t.Fatal(held, err)
	}
	// A waits through fs[0] only, so that restarting fs[0] is what its
	// wait has to survive.
	ca, err := client.New(ctx, client.Config{Endpoints: []string{fs[0].Srv.ClientAddr()}, AutoSyncInterval: -1, MaxRetries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb := servertest.Client(t, fs[1])
	type grant struct {
		h   client.LockHandle
		err error
	}
	acquire := func(c *client.Client, owner string) <-chan grant {
		ch := make(chan grant, 1)
		go func() {
			h, err := c.Acquire(context.Background(), key, time.Minute, client.WithLockOwner(owner))
			ch <- grant{h, err}
		}()
		return ch
	}
	queued := func(n int64) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, "queue length", func() bool {
			info, err := all.DescribeLock(ctx, key)
			return err == nil && info.QueueLength == n
		})
	}
	ga := acquire(ca, "A")
	queued(1)
	gb := acquire(cb, "B")
	queued(2)

	c3.Stop(fs[0])
	c3.Start(fs[0])
	c3.Stop(lead)
	if c3.WaitLeader() == lead {
		t.Fatal("no leader change")
	}
	c3.Start(lead)
	queued(2)

	if err := all.Release(ctx, held.Handle); err != nil {
		t.Fatal(err)
	}
	var a grant
	select {
	case a = <-ga:
	case b := <-gb:
		t.Fatalf("B (queued second) was granted first: %+v, %v", b.h, b.err)
	case <-ctx.Done():
		t.Fatal("no grant after the release")
	}
	if a.err != nil || a.h.Owner != "A" {
		t.Fatalf("A: %+v, %v", a.h, a.err)
	}
	if err := ca.Release(ctx, a.h); err != nil {
		t.Fatal(err)
	}
	b := <-gb
	if b.err != nil || b.h.Token <= a.h.Token {
		t.Fatalf("B: %+v, %v; want a grant after A's (token %d)", b.h, b.err, a.h.Token)
	}
}
