package server

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestHTTPLocksGrantedAt: GET /v1/locks says when each holder was
// granted its lock (the store revision then and the raft entry's time),
// also for a waiter the lock was handed to by a release.
func TestHTTPLocksGrantedAt(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{Name: "n1"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := dkvpb.NewKVClient(conn).Put(ctx, &dkvpb.PutRequest{Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	lc := dkvpb.NewLockClient(conn)
	before := time.Now().UnixMilli()
	first, err := lc.Acquire(ctx, &dkvpb.LockAcquireRequest{Key: []byte("invoice:101"), Owner: "worker-a", TtlMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	var got lockListResponse
	if code := getJSON(t, base+"/v1/locks", &got); code != 200 || len(got.Locks) != 1 {
		t.Fatalf("GET /v1/locks: %d %+v", code, got)
	}
	l := got.Locks[0]
	if l.GrantedRevision != 2 || l.GrantedUnixMs < before || l.GrantedUnixMs > after {
		t.Errorf("granted at revision %d, %d ms; want revision 2 (the put's) and a time in [%d, %d]", l.GrantedRevision, l.GrantedUnixMs, before, after)
	}

	// worker-b waits; worker-a's release hands it the lock.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	done := make(chan error, 1)
	go func() {
		_, err := lc.Acquire(wctx, &dkvpb.LockAcquireRequest{Key: []byte("invoice:101"), Owner: "worker-b", TtlMs: 60000, Wait: true})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		getJSON(t, base+"/v1/locks", &got)
		if len(got.Locks) == 1 && len(got.Locks[0].Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter listed: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	before = time.Now().UnixMilli()
	if _, err := lc.Release(ctx, &dkvpb.LockReleaseRequest{Handle: first.Handle}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after = time.Now().UnixMilli()
	getJSON(t, base+"/v1/locks", &got)
	if len(got.Locks) != 1 || got.Locks[0].Owner != "worker-b" {
		t.Fatalf("after the release: %+v, want worker-b holding", got)
	}
	if l := got.Locks[0]; l.GrantedRevision != 2 || l.GrantedUnixMs < before || l.GrantedUnixMs > after {
		t.Errorf("handed-over lock granted at revision %d, %d ms; want revision 2 and a time in [%d, %d]", l.GrantedRevision, l.GrantedUnixMs, before, after)
	}
}
