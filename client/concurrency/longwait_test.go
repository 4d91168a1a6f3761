package concurrency_test

import (
	"context"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/embed"
)

// shortTimeout is the server's request timeout in these tests; every wait
// below lasts waitFor, well past it, to show that no server-side deadline
// applies to a blocking acquire or campaign.
const (
	shortTimeout = time.Second
	waitFor      = 3 * time.Second
)

func openShortTimeout(t *testing.T) *client.Client {
	t.Helper()
	c, err := embed.Open(context.Background(), t.TempDir(), embed.WithServerConfig(func(cfg *server.Config) {
		cfg.RequestTimeout = shortTimeout
		cfg.TickInterval = 10 * time.Millisecond
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitQueued polls until key's lock has n waiters.
func waitQueued(t *testing.T, c *client.Client, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.DescribeLock(context.Background(), key)
		if err == nil && info.QueueLength == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock %q: want %d waiters, last %+v (%v)", key, n, info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAcquireOutwaitsRequestTimeout: Acquire with a ctx that has no
// deadline waits for a lock held longer than the server's request
// timeout, and gets it when the holder releases.
func TestAcquireOutwaitsRequestTimeout(t *testing.T) {
	c := openShortTimeout(t)
	ctx := context.Background()
	held, err := c.Acquire(ctx, "job", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		h   client.LockHandle
		err error
	}
	got := make(chan result, 1)
	go func() {
		h, err := c.Acquire(context.Background(), "job", 30*time.Second)
		got <- result{h, err}
	}()
	waitQueued(t, c, "job", 1)
	// The holder keeps the lock for waitFor (past the request timeout)
	// before releasing it: the held period is the point of the test.
	release := time.After(waitFor)
	select {
	case r := <-got:
		t.Fatalf("waiter returned while the lock was held: %+v, %v", r.h, r.err)
	case <-release:
	}
	if err := c.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter after %v: %v (a hidden server deadline?)", waitFor, r.err)
	}
	if r.h.Token <= held.Token {
		t.Fatalf("waiter's token %d, want > %d", r.h.Token, held.Token)
	}
}

// TestCampaignOutwaitsRequestTimeout: a standby's Campaign with
// context.Background() outlasts the server's request timeout and wins
// once the leader resigns.
func TestCampaignOutwaitsRequestTimeout(t *testing.T) {
	c := openShortTimeout(t)
	ctx := context.Background()
	s1, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	leader, err := concurrency.NewElection(s1, "svc").Campaign(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *concurrency.Leadership
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := concurrency.NewElection(s2, "svc").Campaign(context.Background(), []byte("b"))
		got <- result{l, err}
	}()
	waitQueued(t, c, "svc", 1)
	select {
	case r := <-got:
		t.Fatalf("standby returned while the leader led: %v", r.err)
	case <-time.After(waitFor):
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("standby campaign after %v: %v (a hidden server deadline?)", waitFor, r.err)
	}
	if r.l.Term() <= leader.Term() {
		t.Fatalf("new term %d, want > %d", r.l.Term(), leader.Term())
	}
	li, err := concurrency.NewElection(s2, "svc").Leader(ctx)
	if err != nil || string(li.Value) != "b" {
		t.Fatalf("leader after resign: %+v, %v; want value b", li, err)
	}
}
