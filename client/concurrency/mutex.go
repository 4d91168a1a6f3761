package concurrency

import (
	"context"
	"errors"
	"sync"

	"github.com/dkv-io/dkv/client"
)

// ErrNotLocked is returned by Unlock when the Mutex holds no lock.
var ErrNotLocked = errors.New("concurrency: mutex is not locked")

// Mutex is a store-enforced lock on one key, living on a Session's lease:
// it is released when the session ends. While it is held, writes to the
// key without Handle() are refused by the store, and writes anywhere made
// client.WithLock(m.Handle()) apply only while this Mutex still holds the
// lock (see docs/locks.md).
type Mutex struct {
	s   *Session
	key string

	mu sync.Mutex
	h  *client.LockHandle
}

// NewMutex returns a Mutex on key; nothing is acquired yet.
func NewMutex(s *Session, key string) *Mutex { return &Mutex{s: s, key: key} }

// Lock waits in the key's FIFO queue until the lock is granted or ctx ends
// (then it leaves the queue and returns ctx's error).
func (m *Mutex) Lock(ctx context.Context) error {
	h, err := m.s.Client().Acquire(ctx, m.key, 0, client.WithLockLease(m.s.Lease()))
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.h = &h
	m.mu.Unlock()
	return nil
}

// TryLock takes the lock if it is free; client.ErrLocked if it is held.
func (m *Mutex) TryLock(ctx context.Context) error {
	r, err := m.s.Client().TryAcquire(ctx, m.key, 0, client.WithLockLease(m.s.Lease()))
	if err != nil {
		return err
	}
	if !r.Acquired {
		return client.ErrLocked
	}
	m.mu.Lock()
	m.h = &r.Handle
	m.mu.Unlock()
	return nil
}

// Unlock releases the lock. client.ErrLocked means the lock had already
// been lost (the session's lease expired) before Unlock.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	h := m.h
	m.h = nil
	m.mu.Unlock()
	if h == nil {
		return ErrNotLocked
	}
	return m.s.Client().Release(ctx, *h)
}

// Key is the locked key.
func (m *Mutex) Key() string { return m.key }

// Handle is the current grant (zero if not locked).
func (m *Mutex) Handle() client.LockHandle {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h == nil {
		return client.LockHandle{}
	}
	return *m.h
}

// Token is the grant's fencing token (0 if not locked).
func (m *Mutex) Token() int64 { return m.Handle().Token }
