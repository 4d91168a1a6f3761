package recipe_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/server/embed"
)

// secondInstance is another client of c's embedded node, over a
// connection of its own: a second web instance.
func secondInstance(t *testing.T, c *client.Client) *client.Client {
	t.Helper()
	conn, err := embed.Server(c).DialInProcess(syncTestCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	c2 := client.NewFromConn(conn, conn.Close)
	t.Cleanup(func() { c2.Close() })
	return c2
}

func newSessionStore(t *testing.T, c recipe.SessionStoreClient, opts ...recipe.SessionStoreOption) *recipe.SessionStore {
	t.Helper()
	s, err := recipe.NewSessionStore(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSessionUpdateLosesNoIncrement: 200 goroutines on two instances each
// increment one session's counter 50 times with Update; it ends at
// exactly 10,000. (A plain read-modify-write loses increments here.)
func TestSessionUpdateLosesNoIncrement(t *testing.T) {
	c1 := syncTestNode(t)
	c2 := secondInstance(t, c1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stores := []*recipe.SessionStore{newSessionStore(t, c1), newSessionStore(t, c2)}
	const goroutines, increments = 200, 50
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for i := 0; i < increments; i++ {
				_, err := s.Update(ctx, "cart-1", func(old []byte) ([]byte, error) {
					n := 0
					if old != nil {
						var err error
						if n, err = strconv.Atoi(string(old)); err != nil {
							return nil, err
						}
					}
					return []byte(strconv.Itoa(n + 1)), nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	data, found, err := stores[1].Get(ctx, "cart-1")
	if err != nil || !found || string(data) != strconv.Itoa(goroutines*increments) {
		t.Fatalf("counter %q (found %v, %v), want %d", data, found, err, goroutines*increments)
	}
}

// TestSessionStoreCRUD: Put, Get, List, Delete; a session expires with
// its lease; Update keeps an existing session's lease and gives a new one
// the store's TTL; an error from fn writes nothing.
func TestSessionStoreCRUD(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	s := newSessionStore(t, c, recipe.WithSessionStorePrefix("app/sess/"), recipe.WithSessionStoreTTL(time.Hour))
	if err := s.Put(ctx, "a", []byte("alice"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "b", []byte("bob"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a", []byte("alice2"), time.Hour); err != nil { // replaces; the old lease is revoked
		t.Fatal(err)
	}
	all, err := s.List(ctx)
	if err != nil || len(all) != 2 || string(all["a"]) != "alice2" || string(all["b"]) != "bob" {
		t.Fatalf("List = %q, %v", all, err)
	}
	ls, err := c.Leases(ctx)
	if err != nil || len(ls) != 2 {
		t.Fatalf("%d leases (%v), want 2: one per live session", len(ls), err)
	}
	if err := s.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := s.Get(ctx, "b"); found || err != nil {
		t.Fatalf("deleted session: found %v, %v", found, err)
	}

	// Update keeps a's lease (its expiry).
	before, _ := c.Get(ctx, "app/sess/a")
	if _, err := s.Update(ctx, "a", func(old []byte) ([]byte, error) { return append(old, '!'), nil }); err != nil {
		t.Fatal(err)
	}
	after, _ := c.Get(ctx, "app/sess/a")
	if string(after.Value) != "alice2!" || after.Lease != before.Lease || after.Lease == 0 {
		t.Fatalf("after Update: %q lease %x, was lease %x", after.Value, after.Lease, before.Lease)
	}
	// Update of a new session creates it on a lease with the store's TTL.
	if _, err := s.Update(ctx, "n", func(old []byte) ([]byte, error) {
		if old != nil {
			t.Errorf("new session: old = %q", old)
		}
		return []byte("new"), nil
	}); err != nil {
		t.Fatal(err)
	}
	kv, err := c.Get(ctx, "app/sess/n")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.TimeToLive(ctx, kv.Lease)
	if err != nil || info.GrantedTTL != time.Hour {
		t.Fatalf("new session's lease: %+v, %v; want a 1h TTL", info, err)
	}
	errNo := errors.New("no")
	if _, err := s.Update(ctx, "n", func([]byte) ([]byte, error) { return []byte("x"), errNo }); !errors.Is(err, errNo) {
		t.Fatalf("Update with a failing fn: %v", err)
	}
	if d, _, _ := s.Get(ctx, "n"); string(d) != "new" {
		t.Fatalf("failed Update wrote %q", d)
	}

	// Expiry: the session's lease ends, the session is gone.
	kv, _ = c.Get(ctx, "app/sess/a")
	if err := c.Revoke(ctx, kv.Lease); err != nil { // what expiry does, without waiting an hour
		t.Fatal(err)
	}
	if _, found, err := s.Get(ctx, "a"); found || err != nil {
		t.Fatalf("expired session: found %v, %v", found, err)
	}
	if err := s.Put(ctx, "", nil, time.Hour); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("empty token: %v", err)
	}
}

// TestSessionUpdateWithdrawnWaiter: an Update waiting behind another one
// of its instance and cancelled before its turn returns ctx's error and
// is not applied; the turn passes on and later Updates run.
func TestSessionUpdateWithdrawnWaiter(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	s := newSessionStore(t, c)
	inFn, unblock := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := s.Update(ctx, "t", func(old []byte) ([]byte, error) {
			select {
			case inFn <- struct{}{}:
				<-unblock
			default: // a retry: do not block again
			}
			return append(old, 'a'), nil
		})
		first <- err
	}()
	<-inFn // the first Update leads and is inside its fn
	wctx, cancel := context.WithCancel(ctx)
	waiter := make(chan error, 1)
	queued := make(chan struct{})
	go func() {
		close(queued)
		_, err := s.Update(wctx, "t", func(old []byte) ([]byte, error) { return append(old, 'w'), nil })
		waiter <- err
	}()
	<-queued
	cancel()
	if err := <-waiter; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn waiter: %v, want context.Canceled", err)
	}
	close(unblock)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, "t", func(old []byte) ([]byte, error) { return append(old, 'b'), nil }); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := s.Get(ctx, "t"); string(d) != "ab" {
		t.Fatalf("session %q, want \"ab\" (the withdrawn update not applied)", d)
	}
}
