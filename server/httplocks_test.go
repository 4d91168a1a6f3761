package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// TestHTTPLocksListsHolderAndWaiters: GET /v1/locks shows each held
// lock's holder, token and FIFO waiters, filtered by prefix.
func TestHTTPLocksListsHolderAndWaiters(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{Name: "n1"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lc := dkvpb.NewLockClient(conn)
	if _, err := lc.Acquire(ctx, &dkvpb.LockAcquireRequest{Key: []byte("jobs/invoice:101"), Owner: "worker-a", TtlMs: 60000}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Acquire(ctx, &dkvpb.LockAcquireRequest{Key: []byte("other"), Owner: "x", TtlMs: 60000}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		lc.Acquire(wctx, &dkvpb.LockAcquireRequest{Key: []byte("jobs/invoice:101"), Owner: "worker-b", TtlMs: 60000, Wait: true})
	}()
	var got lockListResponse
	for deadline := time.Now().Add(10 * time.Second); ; {
		if code := getJSON(t, base+"/v1/locks?prefix=jobs/", &got); code != 200 {
			t.Fatalf("GET /v1/locks: %d", code)
		}
		if len(got.Locks) == 1 && len(got.Locks[0].Waiters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter listed: %+v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l := got.Locks[0]
	if l.Key != "jobs/invoice:101" || l.Owner != "worker-a" || l.Token == 0 || l.RemainingMs <= 0 || l.Waiters[0].Owner != "worker-b" {
		t.Errorf("lock = %+v", l)
	}
	var all lockListResponse
	getJSON(t, base+"/v1/locks", &all)
	if len(all.Locks) != 2 {
		t.Errorf("all locks = %+v, want 2", all.Locks)
	}
	getJSON(t, base+"/v1/locks?limit=1", &all)
	if len(all.Locks) != 1 || !all.More {
		t.Errorf("limit=1: %+v, want one lock and more", all)
	}
	if code := getJSON(t, base+"/v1/locks?limit=0", nil); code != 400 {
		t.Errorf("limit=0: %d, want 400", code)
	}
	wcancel()
	<-done
}

// TestHTTPClusterProgress: the leader reports each member's replicated
// index and lag; a single node is its own leader with no lag.
func TestHTTPClusterProgress(t *testing.T) {
	s, base, _ := startHTTPTestServer(t, Config{Name: "n1"})
	var got progressResponse
	if code := getJSON(t, base+"/v1/cluster/progress", &got); code != 200 {
		t.Fatalf("GET /v1/cluster/progress: %d", code)
	}
	if !got.IsLeader || len(got.Progress) != 1 || got.Progress[0].Match == 0 || got.Progress[0].Lag != 0 || got.MemberID != got.Progress[0].ID {
		t.Errorf("progress = %+v (member %d)", got, s.memberID)
	}
}

// TestHTTPServesDashboard: every member serves the dashboard at /ui/.
func TestHTTPServesDashboard(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{Name: "n1"})
	resp, err := http.Get(base + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "DKV dashboard") {
		t.Fatalf("GET /ui/: %d %.100q", resp.StatusCode, b)
	}
	resp, err = http.Get(base + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/" {
		t.Errorf("GET /ui ended at %s, want a redirect to /ui/", resp.Request.URL.Path)
	}
}
