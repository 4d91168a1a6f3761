package mvcc

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/lock"
)

// Lock commands and enforcement. The lock table lives under s/k (package
// lock) and is written in the same batch as the keys, so a grant, its
// release by a lease expiry, the hand-over to the next waiter, and the
// check a write makes against the lock are all atomic in one apply.
//
// Lock commands change no key and so no revision. A grant's fencing token
// is max(revision of the command + 1, key's last token + 1): never below
// the revision at which it was granted and strictly increasing per key.

// LockGrant is a grant a command made (to the acquirer or to a waiter on a
// release), for the server to wake whoever waits for it.
type LockGrant = dkvpb.LockHandle

// ValidateLockAcquire checks a lock acquisition's structure.
func ValidateLockAcquire(a *dkvpb.LockAcquireRequest, l Limits) error {
	if err := checkKey("lock key", a.GetKey(), l); err != nil {
		return err
	}
	if err := checkOwner(a.GetOwner()); err != nil {
		return err
	}
	if err := checkNonNegative("lease", a.GetLease()); err != nil {
		return err
	}
	if a.GetLease() == 0 {
		if a.GetLeaseOwned() {
			return invalid("lock lease_owned needs a lease")
		}
		return lease.ValidateTTL("lock ttl_ms", a.GetTtlMs())
	}
	if a.GetTtlMs() != 0 {
		return invalid("lock lease and ttl_ms are exclusive")
	}
	return nil
}

// ValidateLockCancel checks the cancellation of a lock wait.
func ValidateLockCancel(c *dkvpb.LockCancelRequest, l Limits) error {
	if err := checkKey("lock key", c.GetKey(), l); err != nil {
		return err
	}
	return checkOwner(c.GetOwner())
}

// CheckOwner refuses a lock owner that is empty or too long.
func CheckOwner(o string) error { return checkOwner(o) }

func checkOwner(o string) error {
	if o == "" {
		return invalid("lock owner is empty")
	}
	if len(o) > 256 {
		return invalid("lock owner is %d bytes; the limit is 256", len(o))
	}
	return nil
}

// ValidateLockHandle checks a handle's structure (nil is no handle and
// valid).
func ValidateLockHandle(h *dkvpb.LockHandle, l Limits) error {
	if h == nil {
		return nil
	}
	if err := checkKey("lock handle key", h.Key, l); err != nil {
		return err
	}
	if h.Token <= 0 || h.Lease <= 0 {
		return invalid("lock handle has token %d and lease %d; both must be positive (a handle comes from Acquire)", h.Token, h.Lease)
	}
	return checkOwner(h.Owner)
}

func (w *Writer) holder(key []byte) (lock.Holder, bool) {
	if _, ok := w.s.held[string(key)]; !ok {
		return lock.Holder{}, false
	}
	h, ok, err := lock.GetHolder(w.b, key)
	must(err)
	return h, ok
}

func handleOf(h *lock.Holder) *dkvpb.LockHandle {
	return &dkvpb.LockHandle{Key: h.Key, Owner: h.Owner, Lease: h.Lease, Token: h.Token}
}

// LockAcquire applies a lock acquisition: granted, queued, or refused
// with the holder.
func (w *Writer) LockAcquire(a *dkvpb.LockAcquireRequest) (*dkvpb.LockAcquireResponse, error) {
	if err := w.checkLease(a.Lease); err != nil {
		return nil, err
	}
	resp := &dkvpb.LockAcquireResponse{Owner: a.Owner}
	h, held := w.holder(a.Key)
	if held && h.Owner == a.Owner {
		// A retry of an acquisition that was granted.
		resp.Acquired, resp.Handle, resp.Lease = true, handleOf(&h), h.Lease
		return resp, nil
	}
	if held {
		wt, ok, err := lock.FindWaiter(w.b, a.Key, a.Owner)
		must(err)
		if ok {
			resp.Queued, resp.Lease, resp.Holder = true, wt.Lease, handleOf(&h)
			return resp, nil
		}
		if !a.Wait {
			resp.Holder = handleOf(&h)
			return resp, nil
		}
	}
	id, own := a.Lease, a.LeaseOwned
	if id == 0 {
		id, own = w.grant(0, a.TtlMs, false), true
	}
	resp.Lease = id
	if held {
		_, err := lock.Enqueue(w.b, &h, a.Owner, id, own)
		must(err)
		resp.Queued, resp.Holder = true, handleOf(&h)
		return resp, nil
	}
	// A free key has an empty queue: every path that frees a key hands it
	// to the first live waiter or empties the queue (handOver,
	// locksOnLeaseRevoked).
	resp.Acquired, resp.Handle = true, w.grantLock(a.Key, a.Owner, id, own, true)
	return resp, nil
}

// grantLock makes owner the holder of key; noWaiters says key's queue is
// empty (see lock.Holder.NoWaiters).
func (w *Writer) grantLock(key []byte, owner string, leaseID int64, own, noWaiters bool) *dkvpb.LockHandle {
	last, err := lock.LastToken(w.b, key)
	must(err)
	tok := max(w.rev, last+1)
	h := lock.Holder{Key: bytes.Clone(key), Owner: owner, Lease: leaseID, Token: tok, OwnLease: own, NoWaiters: noWaiters}
	must(lock.SetHolder(w.b, &h))
	must(lock.SetGrant(w.b, h.Key, w.cur, w.now))
	w.s.held[string(h.Key)] = struct{}{}
	g := handleOf(&h)
	w.locks = append(w.locks, g)
	return g
}

// releaseLock frees h's key, grants it to the first waiter and, if h's
// lease was granted for the lock, revokes that lease.
func (w *Writer) releaseLock(h *lock.Holder) *dkvpb.LockHandle {
	must(lock.DeleteHolder(w.b, h))
	delete(w.s.held, string(h.Key))
	if w.s.obs != nil {
		w.s.obs.Unlocked(w, h.Key) // a claimed job may be claimable again
	}
	var next *dkvpb.LockHandle
	if !h.NoWaiters {
		next = w.handOver(h.Key)
	}
	if h.OwnLease {
		if _, ok := w.getLease(h.Lease); ok {
			_, err := w.leaseRevoke(h.Lease)
			must(err)
		}
	}
	return next
}

// handOver grants the free key to its first waiter whose lease exists
// (by invariant, the first one). The grant is marked NoWaiters when that
// waiter was the last, so its release need not scan the queue.
func (w *Writer) handOver(key []byte) *dkvpb.LockHandle {
	for {
		var first lock.Waiter
		n := 0
		must(lock.Waiters(w.b, key, func(wt lock.Waiter) bool {
			if n == 0 {
				first = wt
			}
			n++
			return n < 2
		}))
		if n == 0 {
			return nil
		}
		must(lock.RemoveWaiter(w.b, key, first))
		if _, ok := w.getLease(first.Lease); !ok {
			continue
		}
		return w.grantLock(key, first.Owner, first.Lease, first.OwnLease, n == 1)
	}
}

// LockRelease applies a release by the holder's handle.
func (w *Writer) LockRelease(hd *dkvpb.LockHandle) *dkvpb.LockReleaseResponse {
	h, ok := w.current(hd)
	if !ok {
		return &dkvpb.LockReleaseResponse{}
	}
	return &dkvpb.LockReleaseResponse{Released: true, Next: w.releaseLock(&h)}
}

// LockCancel applies a cancelled wait: the waiter leaves its queue, or
// releases the lock granted to it meanwhile.
func (w *Writer) LockCancel(c *dkvpb.LockCancelRequest) *dkvpb.LockCancelResponse {
	resp := &dkvpb.LockCancelResponse{}
	wt, ok, err := lock.FindWaiter(w.b, c.Key, c.Owner)
	must(err)
	if ok {
		must(lock.RemoveWaiter(w.b, c.Key, wt))
		if wt.OwnLease {
			if _, ok := w.getLease(wt.Lease); ok {
				_, err := w.leaseRevoke(wt.Lease)
				must(err)
			}
		}
		resp.Dequeued = true
		return resp
	}
	if h, ok := w.holder(c.Key); ok && h.Owner == c.Owner {
		w.releaseLock(&h)
		resp.Released = true
	}
	return resp
}

// locksOnLeaseRevoked runs after lease id's record is deleted: its
// waiters leave their queues and its locks pass to the next waiters.
func (w *Writer) locksOnLeaseRevoked(id int64) {
	keys, err := lock.LeaseKeys(w.b, id)
	must(err)
	for _, k := range keys {
		var dead []lock.Waiter
		must(lock.Waiters(w.b, k, func(wt lock.Waiter) bool {
			if wt.Lease == id {
				dead = append(dead, wt)
			}
			return true
		}))
		for _, wt := range dead {
			must(lock.RemoveWaiter(w.b, k, wt))
		}
		if h, ok := w.holder(k); ok && h.Lease == id {
			h.OwnLease = false // the lease is already gone
			w.releaseLock(&h)
		}
	}
}

// current reports whether hd is the current holder of its key.
func (w *Writer) current(hd *dkvpb.LockHandle) (lock.Holder, bool) {
	if hd == nil {
		return lock.Holder{}, false
	}
	if _, ok := w.s.held[string(hd.Key)]; !ok {
		return lock.Holder{}, false
	}
	return currentIn(w.b, hd)
}

func currentIn(r pebble.Reader, hd *dkvpb.LockHandle) (lock.Holder, bool) {
	h, ok, err := lock.GetHolder(r, hd.Key)
	must(err)
	if !ok || h.Token != hd.Token || h.Lease != hd.Lease || h.Owner != hd.Owner {
		return h, false
	}
	return h, true
}

func staleErr(hd *dkvpb.LockHandle) error {
	return dkverr.New(dkverr.Locked, "lock handle for %q (token %d) is not current: the lock was released, expired or taken over", hd.Key, hd.Token)
}

// checkFence refuses a request whose handle is not current.
func (w *Writer) checkFence(hd *dkvpb.LockHandle) error {
	if hd == nil {
		return nil
	}
	if _, ok := w.current(hd); !ok {
		return staleErr(hd)
	}
	return nil
}

// checkLocked refuses a write to key while key is locked and hd is not
// its current handle; hd itself must already have passed checkFence.
func (w *Writer) checkLocked(key []byte, hd *dkvpb.LockHandle) error {
	h, ok := w.holder(key)
	if !ok {
		return nil
	}
	if hd != nil && bytes.Equal(hd.Key, key) && hd.Token == h.Token {
		return nil
	}
	return dkverr.New(dkverr.Locked, "key %q is locked (fencing token %d); write it with the lock's current handle", key, h.Token)
}

// checkWriteLock checks a single-key write's lock conditions.
func (w *Writer) checkWriteLock(key []byte, hd *dkvpb.LockHandle) error {
	if err := w.checkFence(hd); err != nil {
		return err
	}
	return w.checkLocked(key, hd)
}

// checkDeleteLock checks every live key a delete would remove.
func (w *Writer) checkDeleteLock(d *dkvpb.DeleteRangeRequest) error {
	if err := w.checkFence(d.Lock); err != nil {
		return err
	}
	if len(d.RangeEnd) == 0 && !d.Prefix {
		return w.checkLocked(d.Key, d.Lock)
	}
	if len(w.s.held) == 0 {
		return nil // no key is locked: no need to list the range's keys
	}
	var keys [][]byte
	must(scanLatest(w.b, makeSpan(d.Key, d.RangeEnd, d.Prefix), func(key []byte, _ *record) bool {
		keys = append(keys, bytes.Clone(key))
		return true
	}))
	for _, k := range keys {
		if err := w.checkLocked(k, d.Lock); err != nil {
			return err
		}
	}
	return nil
}

// compareLock evaluates a LOCK compare: 0 when c's handle is current.
func (w *Writer) compareLock(c *dkvpb.Compare) int {
	hd := c.GetLock()
	if hd == nil || !bytes.Equal(hd.Key, c.Key) {
		return 1
	}
	if _, ok := w.current(hd); !ok {
		return 1
	}
	return 0
}

// CheckReadLock refuses a read made under a handle that is not current in
// r (the server passes a snapshot taken after a linearizable wait, and
// reads the keys from the same snapshot).
func CheckReadLock(r pebble.Reader, hd *dkvpb.LockHandle) error {
	if hd == nil {
		return nil
	}
	if _, ok := currentIn(r, hd); !ok {
		return staleErr(hd)
	}
	return nil
}

// LockState is a lock's state as Describe reports it.
type LockState struct {
	Holder    *dkvpb.LockHandle // nil when free
	Queue     int64
	LastToken int64
}

// DescribeLock reads key's lock state through r.
func DescribeLock(r pebble.Reader, key []byte) (LockState, error) {
	var st LockState
	h, ok, err := lock.GetHolder(r, key)
	if err != nil {
		return st, err
	}
	if ok {
		st.Holder = handleOf(&h)
	}
	if err := lock.Waiters(r, key, func(lock.Waiter) bool { st.Queue++; return true }); err != nil {
		return st, err
	}
	st.LastToken, err = lock.LastToken(r, key)
	return st, err
}
