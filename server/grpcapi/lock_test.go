package grpcapi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server/grpcapi"
	"github.com/dkv-io/dkv/server/servertest"
)

// A waiter granted the lock between the wait loop's two reads (holder,
// then queue) was once told "no longer queued" and its Acquire failed,
// although it then held the lock until its lease ended. The hook releases
// the holder at exactly that point; the waiter must get the lock.
func TestWaiterGrantedDuringRecheckGetsTheLock(t *testing.T) {
	conn := servertest.Start(t).Conn
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leases, locks := dkvpb.NewLeaseClient(conn), dkvpb.NewLockClient(conn)
	grant := func() int64 {
		resp, err := leases.Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: 60000})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetId()
	}
	key := []byte("invoice/101")
	first, err := locks.Acquire(ctx, &dkvpb.LockAcquireRequest{Key: key, Lease: grant(), Owner: "a"})
	if err != nil || !first.GetAcquired() {
		t.Fatalf("first acquire: %v %v", first, err)
	}
	var once sync.Once
	released := make(chan error, 1)
	grpcapi.SetLockRecheckHook(func() {
		once.Do(func() {
			_, err := locks.Release(ctx, &dkvpb.LockReleaseRequest{Handle: first.GetHandle()})
			released <- err
		})
	})
	t.Cleanup(func() { grpcapi.SetLockRecheckHook(nil) })
	second, err := locks.Acquire(ctx, &dkvpb.LockAcquireRequest{Key: key, Lease: grant(), Owner: "b", Wait: true})
	if err := <-released; err != nil {
		t.Fatalf("release in the recheck: %v", err)
	}
	if err != nil || !second.GetAcquired() || second.GetHandle().GetOwner() != "b" {
		t.Fatalf("waiter granted during its recheck: %v, %v; want the lock", second, err)
	}
}
