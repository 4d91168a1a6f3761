package etcdapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func grant(t *testing.T, n *node, ttl int64) int64 {
	t.Helper()
	g, err := n.l.LeaseGrant(ctxT(t), &etcdserverpb.LeaseGrantRequest{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return g.ID
}

type lockResult struct {
	r   *v3lockpb.LockResponse
	err error
}

func lockAsync(ctx context.Context, lc v3lockpb.LockClient, name string, lease int64) chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		r, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(name), Lease: lease})
		ch <- lockResult{r, err}
	}()
	return ch
}

// notYet fails if ch has a result now, after the waiter has been seen
// queued (its key exists), so a wrong grant would already be visible.
func waitQueued(t *testing.T, n *node, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r, err := n.kv.Range(ctxT(t), &etcdserverpb.RangeRequest{Key: []byte(key)})
		if err == nil && len(r.Kvs) == 1 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("waiter's key %s never appeared", key)
}

// TestLock: etcd's v3lock Lock/Unlock over the KV, with clientv3
// concurrency's key layout: the holder's key is name/<lease hex>, a
// second locker waits until the first unlocks, and a key written the
// way clientv3's Mutex writes it (as etcdctl lock does) holds off this
// service's lockers too.
func TestLock(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	lc := v3lockpb.NewLockClient(n.conn)
	l1, l2 := grant(t, n, 30), grant(t, n, 30)

	r1, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("mylock"), Lease: l1})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("mylock/%x", l1); string(r1.Key) != want {
		t.Fatalf("lock key %q, want %q", r1.Key, want)
	}
	if r1.Header.Revision == 0 || r1.Header.MemberId == 0 {
		t.Fatalf("header %v", r1.Header)
	}
	// The same lease locking again holds it at once (its key is first).
	if again, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("mylock"), Lease: l1}); err != nil || string(again.Key) != string(r1.Key) {
		t.Fatalf("relock by the holder's lease: %v %v", again, err)
	}

	second := lockAsync(ctx, lc, "mylock", l2)
	waitQueued(t, n, fmt.Sprintf("mylock/%x", l2))
	select {
	case r := <-second:
		t.Fatalf("second locker got the lock while the first holds it: %v %v", r.r, r.err)
	default:
	}
	if _, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r1.Key}); err != nil {
		t.Fatal(err)
	}
	r2 := <-second
	if r2.err != nil || string(r2.r.Key) != fmt.Sprintf("mylock/%x", l2) {
		t.Fatalf("second lock after unlock: %v %v", r2.r, r2.err)
	}
	if _, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r2.r.Key}); err != nil {
		t.Fatal(err)
	}

	// A holder that took the lock as clientv3's Mutex does: its key under
	// the name, created first.
	l3 := grant(t, n, 30)
	foreign := fmt.Sprintf("mylock/%x", l3)
	if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte(foreign), Lease: l3}); err != nil {
		t.Fatal(err)
	}
	third := lockAsync(ctx, lc, "mylock", l1)
	waitQueued(t, n, fmt.Sprintf("mylock/%x", l1))
	select {
	case r := <-third:
		t.Fatalf("locker got the lock held through clientv3's layout: %v %v", r.r, r.err)
	default:
	}
	// The foreign holder's lease is revoked: its key goes, the lock passes.
	if _, err := n.l.LeaseRevoke(ctx, &etcdserverpb.LeaseRevokeRequest{ID: l3}); err != nil {
		t.Fatal(err)
	}
	if r := <-third; r.err != nil {
		t.Fatalf("lock after the holder's lease was revoked: %v", r.err)
	}
}

// TestLockErrors: a waiter whose own lease ends while it waits is told
// its session expired; a lock on a lease that does not exist is etcd's
// lease-not-found; a waiter whose call is canceled leaves the queue.
func TestLockErrors(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	lc := v3lockpb.NewLockClient(n.conn)

	_, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("l"), Lease: 12345})
	isErr(t, err, rpctypes.ErrGRPCLeaseNotFound)
	_, err = lc.Lock(ctx, &v3lockpb.LockRequest{Lease: 1})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty name: %v", err)
	}

	holder, waiter := grant(t, n, 30), grant(t, n, 30)
	if _, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("l"), Lease: holder}); err != nil {
		t.Fatal(err)
	}
	w := lockAsync(ctx, lc, "l", waiter)
	waitQueued(t, n, fmt.Sprintf("l/%x", waiter))
	if _, err := n.l.LeaseRevoke(ctx, &etcdserverpb.LeaseRevokeRequest{ID: waiter}); err != nil {
		t.Fatal(err)
	}
	// The waiter's key is gone, so the holder is still the only one; once
	// the holder lets go, the waiter learns its session expired.
	if _, err := n.kv.DeleteRange(ctx, &etcdserverpb.DeleteRangeRequest{Key: []byte(fmt.Sprintf("l/%x", holder))}); err != nil {
		t.Fatal(err)
	}
	if r := <-w; status.Code(r.err) != codes.FailedPrecondition {
		t.Fatalf("waiter whose lease was revoked: %v %v", r.r, r.err)
	}

	// A canceled waiter's key is deleted.
	h2, w2 := grant(t, n, 30), grant(t, n, 30)
	if _, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("c"), Lease: h2}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cw := lockAsync(cctx, lc, "c", w2)
	waitQueued(t, n, fmt.Sprintf("c/%x", w2))
	cancel()
	if r := <-cw; status.Code(r.err) != codes.Canceled {
		t.Fatalf("canceled waiter: %v", r.err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte(fmt.Sprintf("c/%x", w2))})
		if err == nil && len(r.Kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("canceled waiter's key still there: %v %v", r, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
