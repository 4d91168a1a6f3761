package state

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/lock"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/ratelimit"
)

// Reader is how the serving side (the node's gRPC and HTTP handlers)
// reads the applied state, without knowing the storage engine beneath
// it. The Machine implements it.
type Reader interface {
	// Snapshot is a point-in-time view of the state applied so far:
	// every read through it sees the same state. Close it when done.
	Snapshot() View
	// Latest is the applied state as it is at each read: two reads
	// through it may see different states. For single lookups; Close is
	// a no-op.
	Latest() View
}

var _ Reader = (*Machine)(nil)

// Snapshot is a point-in-time view of the applied state.
func (m *Machine) Snapshot() View {
	snap := m.store.DB().NewSnapshot()
	return View{kv: m.kv, r: snap, snap: snap}
}

// LocalState is the LocalState of the applied state, as it is at each
// read: what a request's needs read (Command.Needs), without an
// allocation per request.
func (m *Machine) LocalState() LocalState { return DBState(m.store.DB()) }

// Latest is the applied state as it is at each read.
func (m *Machine) Latest() View {
	db := m.store.DB()
	return View{kv: m.kv, r: db, db: db}
}

// View reads the applied state: key ranges and queries through the MVCC
// engine, and the lease, lock, rate limit, member and store records. It
// is a small value: a read allocates nothing for it.
type View struct {
	kv   *mvcc.Store
	r    pebble.Reader
	db   *pebble.DB       // set for Latest: ranges read it without a snapshot
	snap *pebble.Snapshot // set for Snapshot: Close releases it
}

// Close releases a Snapshot view.
func (v View) Close() error {
	if v.snap == nil {
		return nil
	}
	return v.snap.Close()
}

// Range reads a key range (mvcc.Store.Range; for a Latest view,
// RangeLatest, with the header revision exactly that of the state read).
func (v View) Range(req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	if v.db != nil {
		return v.kv.RangeLatest(v.db, req)
	}
	return v.kv.Range(v.r, req)
}

// Query runs a secondary-index query (mvcc.Store.Query).
func (v View) Query(ctx context.Context, q *mvcc.Query, o mvcc.QueryOptions) (*mvcc.QueryResult, error) {
	return v.kv.Query(ctx, v.r, q, o)
}

// Indexes are the secondary indexes defined.
func (v View) Indexes() ([]mvcc.IndexDef, error) { return v.kv.Indexes(v.r) }

// Counters are the store's revision and compact revision.
func (v View) Counters() (rev, compact int64, err error) { return mvcc.Counters(v.r) }

// CheckReadLock refuses a read under a lock handle that does not hold
// its lock (mvcc.CheckReadLock).
func (v View) CheckReadLock(h *dkvpb.LockHandle) error { return mvcc.CheckReadLock(v.r, h) }

// DescribeLock is a lock's holder, queue length and last token.
func (v View) DescribeLock(key []byte) (mvcc.LockState, error) { return mvcc.DescribeLock(v.r, key) }

// HeldLocks calls fn with the key of every held lock, in key order.
func (v View) HeldLocks(fn func(key []byte)) error { return lock.HeldKeys(v.r, fn) }

// LockHolder is the holder of the lock on key, if it is held.
func (v View) LockHolder(key []byte) (lock.Holder, bool, error) { return lock.GetHolder(v.r, key) }

// LockWaiter is owner's place in the queue of the lock on key, if it
// waits there.
func (v View) LockWaiter(key []byte, owner string) (lock.Waiter, bool, error) {
	return lock.FindWaiter(v.r, key, owner)
}

// LockWaiters calls fn with the waiters of the lock on key, in queue
// order, until fn returns false.
func (v View) LockWaiters(key []byte, fn func(lock.Waiter) bool) error {
	return lock.Waiters(v.r, key, fn)
}

// LockGrant is when the lock on key was granted to its holder: the
// store revision and the granting entry's time.
func (v View) LockGrant(key []byte) (rev, unixNano int64, ok bool, err error) {
	return lock.GetGrant(v.r, key)
}

// LeaseLocks are the keys of the locks lease id holds.
func (v View) LeaseLocks(id int64) ([][]byte, error) { return lock.LeaseKeys(v.r, id) }

// Lease is lease id's record.
func (v View) Lease(id int64) (lease.Record, bool, error) { return lease.Get(v.r, id) }

// Leases calls fn with every lease's record until fn returns false.
func (v View) Leases(fn func(lease.Record) bool) error { return lease.List(v.r, fn) }

// LeaseKeys calls fn with every key attached to lease id until fn
// returns false.
func (v View) LeaseKeys(id int64, fn func(key []byte) bool) error { return lease.Keys(v.r, id, fn) }

// RateLimits calls fn with every rate limit bucket whose key starts with
// prefix, in key order, until fn returns false.
func (v View) RateLimits(prefix []byte, fn func(key []byte, s ratelimit.State) bool) error {
	return ratelimit.Each(v.r, prefix, fn)
}

// Members is the member table.
func (v View) Members() ([]*dkvpb.Member, error) { return Members(v.r) }

// ExpiredSessions is the ids of up to limit sessions whose deadline is
// before now (unix nanoseconds).
func (v View) ExpiredSessions(now int64, limit int) ([]uint64, error) {
	return ExpiredSessions(v.r, now, limit)
}

// Store is the named store's record, if it exists.
func (v View) Store(name string) (*dkvpb.StoreInfo, bool, error) { return GetStore(v.r, name) }

// Stores are every named store's records.
func (v View) Stores() ([]*dkvpb.StoreInfo, error) { return ListStores(v.r) }
