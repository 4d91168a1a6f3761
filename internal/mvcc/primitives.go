package mvcc

import (
	"bytes"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/lock"
)

// Primitives for commands built on the keyspace outside this package
// (package state's job queue): reads through the batch being applied,
// writes whose checks the caller made, and the lock table. They keep
// every invariant the command methods keep (revisions, history, events,
// lease attachment, indexes), and like them panic on storage errors.

// WriteObserver is told of the keyspace changes a command makes as it
// makes them, for state kept beside the keyspace in memory (package
// state's queue floor). Its methods run on the apply goroutine, inside
// the command; they may read through w but must not write.
type WriteObserver interface {
	// Put: key's latest version was just written.
	Put(w *Writer, key []byte)
	// Deleted: key was just deleted.
	Deleted(w *Writer, key []byte)
	// Unlocked: key's lock was just released.
	Unlocked(w *Writer, key []byte)
	// Reloaded: the state was re-read (Reload): what was learnt of it is
	// stale.
	Reloaded()
}

// SetObserver installs o (nil: none). Call it before applying commands.
func (s *Store) SetObserver(o WriteObserver) { s.obs = o }

// Exists reports whether key is live in the state being applied.
func (w *Writer) Exists(key []byte) bool {
	_, ok := w.get(key)
	return ok
}

// Latest is key's latest version in the state being applied (a copy).
func (w *Writer) Latest(key []byte) (*dkvpb.KeyValue, bool) {
	rec, ok := w.get(key)
	if !ok {
		return nil, false
	}
	k := bytes.Clone(key)
	kv := rec.kv(k)
	kv.Value = bytes.Clone(rec.value)
	return kv, true
}

// ScanLatest visits the live keys in [start, end) in key order, through
// the batch being applied. key is valid only during the call; kv copies
// the key's latest version, for the keys the caller keeps. Returning
// false stops the scan.
func (w *Writer) ScanLatest(start, end []byte, fn func(key []byte, kv func() *dkvpb.KeyValue) bool) {
	var cur *record
	var curKey []byte
	kv := func() *dkvpb.KeyValue {
		k := bytes.Clone(curKey)
		v := cur.kv(k)
		v.Value = bytes.Clone(cur.value)
		return v
	}
	must(scanLatest(w.b, span{start: start, end: end}, func(key []byte, rec *record) bool {
		cur, curKey = rec, key
		return fn(key, kv)
	}))
}

// WritePut writes p (no lock, lease or condition checks: the caller made
// them, see CheckPut). Its event, like every write's, is the command's.
func (w *Writer) WritePut(p *dkvpb.PutRequest) { w.put(p, &dkvpb.PutResponse{}) }

// WriteDelete deletes every live key d names (no lock or condition
// checks: the caller made them).
func (w *Writer) WriteDelete(d *dkvpb.DeleteRangeRequest) { w.deleteRange(d) }

// CheckPut refuses p as Put would (its lease, lock and quota), writing
// nothing.
func (w *Writer) CheckPut(p *dkvpb.PutRequest) error { return w.checkPut(p) }

// CheckUnlocked refuses a write to key while key is locked.
func (w *Writer) CheckUnlocked(key []byte) error { return w.checkLocked(key, nil) }

// Locked reports whether key is locked.
func (w *Writer) Locked(key []byte) bool {
	_, ok := w.s.held[string(key)]
	return ok
}

// LockHolder is key's lock holder's handle; false if key is not locked.
func (w *Writer) LockHolder(key []byte) (*dkvpb.LockHandle, bool) {
	h, ok := w.holder(key)
	if !ok {
		return nil, false
	}
	return handleOf(&h), true
}

// CurrentLock is the holder hd names if hd is its key's current handle.
func (w *Writer) CurrentLock(hd *dkvpb.LockHandle) (lock.Holder, bool) { return w.current(hd) }

// LastLockToken is the last fencing token granted on key (0: none).
func (w *Writer) LastLockToken(key []byte) int64 {
	last, err := lock.LastToken(w.b, key)
	must(err)
	return last
}

// GrantLease grants a new lease of ttlMs, owned by nobody (a lock's own
// lease), and returns its id.
func (w *Writer) GrantLease(ttlMs int64) int64 { return w.grant(0, ttlMs, false) }

// GrantLock makes owner the holder of key, which must be free with no
// waiters, on lease leaseID (ownLease: the lease was granted for the
// lock, and goes with it).
func (w *Writer) GrantLock(key []byte, owner string, leaseID int64, ownLease bool) *dkvpb.LockHandle {
	return w.grantLock(key, owner, leaseID, ownLease, true)
}

// ReleaseLock frees h's key, grants it to the first waiter and, if h's
// lease was granted for the lock, revokes that lease.
func (w *Writer) ReleaseLock(h *lock.Holder) { w.releaseLock(h) }

// StaleHandleError is the Locked refusal of a handle that is not current.
func StaleHandleError(hd *dkvpb.LockHandle) error { return staleErr(hd) }
