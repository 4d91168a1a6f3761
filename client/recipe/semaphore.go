package recipe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
)

// SyncClient is what the semaphore uses of a DKV client: keys, watches
// and locks. *client.Client satisfies it.
type SyncClient interface {
	client.KV
	client.Watcher
	client.Locker
}

// ErrPermitLost is returned by Acquire when the session ended (its lease
// expired) while waiting: the waiter's place in the queue is gone.
var ErrPermitLost = errors.New("recipe: the session's lease ended; the semaphore place is gone")

// Semaphore lets at most n holders in at once, first come first served.
//
// Design: each permit is one of n store-enforced locks, the slots
// <name>/slot/0 .. <name>/slot/<n-1>, taken on the session's lease. The
// store's lock table, not this code, is what guarantees that no more
// than n hold a permit (one holder per slot), and each permit's handle
// carries the slot's fencing token, usable with client.WithLock on any
// write. Fairness comes from a queue of keys <name>/q/<owner> on the
// session's lease, ordered by create revision: the n oldest may take a
// slot, every other waiter watches the key n places ahead of it and
// moves up when that key is deleted (a release, or its session's lease
// expiring, which drops the key and its slot in the same raft entry).
// A holder's queue key is always among the n oldest (only keys ahead of
// it can go), and it frees its slot before its key, so a waiter that
// reaches the n oldest always finds a free slot. Every process must use
// the same n for a name.
type Semaphore struct {
	s    *concurrency.Session
	c    SyncClient
	name string
	n    int
}

// NewSemaphore returns the semaphore name (a key prefix) of n permits,
// whose permits live on s's lease. s's client must also be a
// client.Watcher (a *client.Client is).
func NewSemaphore(s *concurrency.Session, name string, n int) (*Semaphore, error) {
	c, ok := s.Client().(SyncClient)
	switch {
	case !ok:
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "semaphore: the session's client cannot watch (it must be a recipe.SyncClient)"}
	case name == "":
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "semaphore name is empty"}
	case n < 1 || n > maxPermits:
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("semaphore permits %d: it must be 1 to %d", n, maxPermits)}
	}
	return &Semaphore{s: s, c: c, name: name, n: n}, nil
}

// maxPermits bounds n: Acquire may try every slot once.
const maxPermits = 1024

// Permit is one held permit.
type Permit struct {
	sem  *Semaphore
	qkey string
	// Slot is which of the n slots this permit is.
	Slot int
	// Handle is the slot lock's grant: pass it to client.WithLock to fence
	// writes, so a holder paused past its lease cannot write after another
	// took its slot.
	Handle client.LockHandle
}

// Token is the permit's fencing token (per slot, only grows).
func (p *Permit) Token() int64 { return p.Handle.Token }

func (m *Semaphore) slotKey(i int) string { return m.name + "/slot/" + strconv.Itoa(i) }
func (m *Semaphore) queuePrefix() string  { return m.name + "/q/" }

// Acquire waits, in FIFO order, for a permit, until ctx ends (then it
// leaves the queue and returns ctx's error). It is woken by watches,
// never by polling.
func (m *Semaphore) Acquire(ctx context.Context) (*Permit, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	qkey := m.queuePrefix() + id
	if _, err := m.c.Put(ctx, qkey, nil, client.WithLease(m.s.Lease())); err != nil {
		return nil, err
	}
	slot := -1 // a slot whose TryAcquire failed: it may have been granted
	p, err := m.wait(ctx, qkey, id, &slot)
	if err != nil {
		// Leave the queue, and give back a slot an interrupted TryAcquire
		// may have taken (the same owner makes the retry return that
		// grant); a bounded context of its own, since ctx may be the
		// reason we stopped.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if slot >= 0 {
			if r, err := m.c.TryAcquire(cctx, m.slotKey(slot), 0, client.WithLockLease(m.s.Lease()), client.WithLockOwner(id)); err == nil && r.Acquired {
				_ = m.c.Release(cctx, r.Handle)
			}
		}
		_, _ = m.c.Delete(cctx, qkey)
		return nil, err
	}
	return p, nil
}

func (m *Semaphore) wait(ctx context.Context, qkey, owner string, failed *int) (*Permit, error) {
	for {
		select {
		case <-m.s.Done():
			return nil, ErrPermitLost
		default:
		}
		rr, err := m.c.List(ctx, m.queuePrefix(), client.WithSort(client.SortByCreateRevision, client.SortAscend), client.WithKeysOnly())
		if err != nil {
			return nil, err
		}
		idx := -1
		for i, kv := range rr.KVs {
			if kv.Key == qkey {
				idx = i
				break
			}
		}
		if idx < 0 {
			return nil, ErrPermitLost
		}
		watchKey, watchOpts := "", []client.WatchOption{client.WithStartRevision(rr.Revision + 1), client.WithFilterPuts()}
		if idx < m.n {
			p, err := m.takeSlot(ctx, qkey, owner, failed)
			if p != nil || err != nil {
				return p, err
			}
			// Every slot busy although we are among the n oldest: a holder
			// of another n, or one between freeing its slot and its key.
			// Wait for any key of the queue to go.
			watchKey = m.queuePrefix()
			watchOpts = append(watchOpts, client.WithPrefix())
		} else {
			watchKey = rr.KVs[idx-m.n].Key
		}
		if err := waitDelete(ctx, m.c, m.s.Done(), watchKey, watchOpts); err != nil {
			return nil, err
		}
	}
}

// takeSlot tries each slot once; nil, nil if all are held. A failed
// try's slot goes to *failed.
func (m *Semaphore) takeSlot(ctx context.Context, qkey, owner string, failed *int) (*Permit, error) {
	for i := range m.n {
		r, err := m.c.TryAcquire(ctx, m.slotKey(i), 0, client.WithLockLease(m.s.Lease()), client.WithLockOwner(owner))
		if err != nil {
			*failed = i
			return nil, err
		}
		if r.Acquired {
			return &Permit{sem: m, qkey: qkey, Slot: i, Handle: r.Handle}, nil
		}
	}
	return nil, nil
}

// waitDelete returns once an event under the watch arrives (or done is
// closed: the session ended, and the caller's loop finds its key gone).
func waitDelete(ctx context.Context, c client.Watcher, done <-chan struct{}, key string, opts []client.WatchOption) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.WatchKey(wctx, key, opts...)
	if err != nil {
		return err
	}
	for {
		select {
		case b, ok := <-w.Events():
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return w.Err()
			}
			if len(b.Events) > 0 {
				return nil
			}
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Release gives the permit up: the slot first, then the queue place, so
// the waiter it wakes finds the slot free. client.ErrLocked means the
// permit had already been lost (the session's lease expired).
func (p *Permit) Release(ctx context.Context) error {
	err := p.sem.c.Release(ctx, p.Handle)
	if _, derr := p.sem.c.Delete(ctx, p.qkey); err == nil {
		err = derr
	}
	return err
}
