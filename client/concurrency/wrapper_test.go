package concurrency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/server/embed"
)

// namespaced runs every key of the recipes under a prefix, the way an
// application shares one cluster between tenants; it also counts the
// lease grants and keep-alives it passes on.
type namespaced struct {
	concurrency.Client
	prefix            string
	grants, keepalive atomic.Int64
}

func (n *namespaced) Put(ctx context.Context, key string, v []byte, opts ...client.OpOption) (*client.PutResult, error) {
	return n.Client.Put(ctx, n.prefix+key, v, opts...)
}

func (n *namespaced) Get(ctx context.Context, key string, opts ...client.OpOption) (*client.KeyValue, error) {
	return n.Client.Get(ctx, n.prefix+key, opts...)
}

func (n *namespaced) Delete(ctx context.Context, key string, opts ...client.OpOption) (*client.DeleteResult, error) {
	return n.Client.Delete(ctx, n.prefix+key, opts...)
}

func (n *namespaced) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...client.LockOption) (client.LockHandle, error) {
	return n.Client.Acquire(ctx, n.prefix+key, ttl, opts...)
}

func (n *namespaced) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...client.LockOption) (*client.LockResult, error) {
	return n.Client.TryAcquire(ctx, n.prefix+key, ttl, opts...)
}

func (n *namespaced) DescribeLock(ctx context.Context, key string) (*client.LockInfo, error) {
	return n.Client.DescribeLock(ctx, n.prefix+key)
}

func (n *namespaced) Grant(ctx context.Context, ttl time.Duration, opts ...client.LeaseOption) (*client.LeaseGrant, error) {
	n.grants.Add(1)
	return n.Client.Grant(ctx, ttl, opts...)
}

func (n *namespaced) KeepAlive(ctx context.Context, id int64) (<-chan error, error) {
	n.keepalive.Add(1)
	return n.Client.KeepAlive(ctx, id)
}

// The recipes run on whatever satisfies concurrency.Client: through a
// namespace wrapper, the mutex and the election live under its prefix in
// the store, and the store enforces them there.
func TestRecipesThroughWrapper(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := &namespaced{Client: c, prefix: "tenant-a/"}

	s, err := concurrency.NewSession(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ns.grants.Load() != 1 || ns.keepalive.Load() != 1 {
		t.Fatalf("session went around the wrapper: %d grants, %d keep-alives", ns.grants.Load(), ns.keepalive.Load())
	}
	if s.Client() != concurrency.Client(ns) {
		t.Fatal("Session.Client is not the wrapper it was given")
	}

	m := concurrency.NewMutex(s, "job")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := c.DescribeLock(ctx, "tenant-a/job")
	if err != nil || info.Holder == nil || *info.Holder != m.Handle() {
		t.Fatalf("lock on the prefixed key: %+v, %v; mutex holds %v", info, err, m.Handle())
	}
	if _, err := c.Put(ctx, "tenant-a/job", []byte("x")); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("unguarded write to the locked key: %v, want ErrLocked", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	l, err := concurrency.NewElection(s, "leader").Campaign(ctx, []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	li, err := concurrency.Leader(ctx, c, "tenant-a/leader")
	if err != nil || string(li.Value) != "me" || li.Term != l.Term() {
		t.Fatalf("leader seen without the wrapper: %+v, %v; want me at term %d", li, err, l.Term())
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := concurrency.Leader(ctx, ns, "leader"); !errors.Is(err, concurrency.ErrNoLeader) {
		t.Fatalf("after Resign: %v, want ErrNoLeader", err)
	}
}
