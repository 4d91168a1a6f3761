package mvcc

import (
	"fmt"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

func acquireReq(key, owner string, leaseID int64, wait bool) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockAcquire{LockAcquire: &dkvpb.LockAcquireRequest{
		Key: []byte(key), Owner: owner, Lease: leaseID, Wait: wait}}}
}

func (h *harness) acquire(key, owner string, leaseID int64, wait bool) *dkvpb.LockAcquireResponse {
	h.t.Helper()
	return h.mustApply(acquireReq(key, owner, leaseID, wait)).Resp.(*dkvpb.LockAcquireResponse)
}

func (h *harness) release(hd *dkvpb.LockHandle) *dkvpb.LockReleaseResponse {
	h.t.Helper()
	return h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockRelease{
		LockRelease: &dkvpb.LockReleaseRequest{Handle: hd}}}).Resp.(*dkvpb.LockReleaseResponse)
}

func (h *harness) putLocked(key, val string, hd *dkvpb.LockHandle) error {
	h.t.Helper()
	return h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{
		Key: []byte(key), Value: []byte(val), Lock: hd}}}).Err
}

func (h *harness) holderOf(key string) *dkvpb.LockHandle {
	h.t.Helper()
	st, err := DescribeLock(h.db, []byte(key))
	if err != nil {
		h.t.Fatal(err)
	}
	return st.Holder
}

func isLocked(err error) bool { return dkverr.CodeOf(err) == dkverr.Locked }

func TestLockGrantQueueFIFORelease(t *testing.T) {
	h := newHarness(t)
	a := h.acquire("k", "a", 1, false)
	if !a.Acquired || a.Handle.Token <= 0 {
		t.Fatalf("first acquire: %v", a)
	}
	// Try without wait: a plain "held" result, not an error, and no queue entry.
	if b := h.acquire("k", "b", 2, false); b.Acquired || b.Queued || b.Holder.GetOwner() != "a" {
		t.Fatalf("try on held lock: %v", b)
	}
	// Retrying the granted acquisition returns the same grant.
	if again := h.acquire("k", "a", 1, false); !again.Acquired || again.Handle.Token != a.Handle.Token {
		t.Fatalf("retry: %v", again)
	}
	for i, o := range []string{"w1", "w2", "w3"} {
		r := h.acquire("k", o, int64(2+i), true)
		if !r.Queued || r.Acquired {
			t.Fatalf("waiter %s: %v", o, r)
		}
	}
	if r := h.acquire("k", "w2", 3, true); !r.Queued {
		t.Fatalf("re-queue of w2 must be idempotent: %v", r)
	}
	if st, _ := DescribeLock(h.db, []byte("k")); st.Queue != 3 {
		t.Fatalf("queue length %d, want 3", st.Queue)
	}
	prev := a.Handle
	for _, want := range []string{"w1", "w2", "w3"} {
		rel := h.release(prev)
		if !rel.Released || rel.Next.GetOwner() != want {
			t.Fatalf("release: %v, want next %s", rel, want)
		}
		if rel.Next.Token <= prev.Token {
			t.Fatalf("token %d not above %d", rel.Next.Token, prev.Token)
		}
		if h.release(prev).Released {
			t.Fatal("a stale handle released the lock")
		}
		prev = rel.Next
	}
	if rel := h.release(prev); !rel.Released || rel.Next != nil {
		t.Fatalf("last release: %v", rel)
	}
	if h.holderOf("k") != nil {
		t.Fatal("lock still held after the last release")
	}
	// A new grant after everything still has a larger token.
	if n := h.acquire("k", "z", 1, false); n.Handle.Token <= prev.Token {
		t.Fatalf("token went back: %d <= %d", n.Handle.Token, prev.Token)
	}
}

func TestLockLeaseExpiryHandsOver(t *testing.T) {
	h := newHarness(t)
	a := h.acquire("k", "a", 1, false)
	h.acquire("k", "dead", 2, true) // its lease will be revoked first
	h.acquire("k", "b", 3, true)
	h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: 2}}})
	if st, _ := DescribeLock(h.db, []byte("k")); st.Queue != 1 {
		t.Fatalf("revoked waiter stayed queued: %d", st.Queue)
	}
	// Expiry of the holder's lease (epoch 1: never renewed) releases and
	// hands over in the same apply.
	res := h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: 1, Epoch: 1}}})
	if len(res.Locks) != 1 || res.Locks[0].Owner != "b" {
		t.Fatalf("expiry granted %v, want b", res.Locks)
	}
	hb := h.holderOf("k")
	if hb.GetOwner() != "b" || hb.Token <= a.Handle.Token {
		t.Fatalf("holder after expiry: %v", hb)
	}
	if err := h.putLocked("k", "late", a.Handle); !isLocked(err) {
		t.Fatalf("write with the expired handle: %v, want Locked", err)
	}
	if err := h.putLocked("k", "b's", hb); err != nil {
		t.Fatal(err)
	}
	if got := string(h.get("k").Value); got != "b's" {
		t.Fatalf("value %q", got)
	}
}

func TestLockEnforcement(t *testing.T) {
	h := newHarness(t)
	if err := h.putLocked("k", "v0", nil); err != nil {
		t.Fatal(err)
	}
	a := h.acquire("k", "a", 1, false).Handle
	rev := h.s.Revision()
	if err := h.putLocked("k", "x", nil); !isLocked(err) {
		t.Fatalf("unguarded put: %v", err)
	}
	del := func(key string, prefix bool, hd *dkvpb.LockHandle) error {
		return h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: &dkvpb.DeleteRangeRequest{
			Key: []byte(key), Prefix: prefix, Lock: hd}}}).Err
	}
	if err := del("k", false, nil); !isLocked(err) {
		t.Fatalf("unguarded delete: %v", err)
	}
	if err := del("", true, nil); !isLocked(err) {
		t.Fatalf("prefix delete over a locked key: %v", err)
	}
	ctr := h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: &dkvpb.CounterRequest{Key: []byte("k"), Delta: 1}}})
	if !isLocked(ctr.Err) {
		t.Fatalf("unguarded counter: %v", ctr.Err)
	}
	txn := h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: &dkvpb.TxnRequest{
		Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("t")}}}}}}})
	if !isLocked(txn.Err) {
		t.Fatalf("unguarded txn put: %v", txn.Err)
	}
	if h.s.Revision() != rev {
		t.Fatal("a refused write changed the revision")
	}
	if err := h.putLocked("k", "mine", a); err != nil {
		t.Fatal(err)
	}
	// Fence: a write to another key under a current handle applies...
	if err := h.putLocked("other", "fenced", a); err != nil {
		t.Fatal(err)
	}
	// ...and a forged handle (right key, wrong token) does not.
	forged := &dkvpb.LockHandle{Key: a.Key, Owner: a.Owner, Lease: a.Lease, Token: a.Token + 1}
	if err := h.putLocked("k", "forged", forged); !isLocked(err) {
		t.Fatalf("forged handle: %v", err)
	}
	// A handle for another lock does not open this one.
	o := h.acquire("o", "o", 2, false).Handle
	if err := h.putLocked("k", "wrong lock", o); !isLocked(err) {
		t.Fatalf("other lock's handle: %v", err)
	}
	h.release(a)
	if err := h.putLocked("k", "stale", a); !isLocked(err) {
		t.Fatalf("released handle on its key: %v", err)
	}
	if err := h.putLocked("other", "stale fence", a); !isLocked(err) {
		t.Fatalf("released handle as a fence: %v", err)
	}
	if err := h.putLocked("k", "free", nil); err != nil {
		t.Fatalf("unguarded put on a free key: %v", err)
	}
	if got := string(h.get("other").Value); got != "fenced" {
		t.Fatalf("other = %q", got)
	}
	if err := CheckReadLock(h.db, a); !isLocked(err) {
		t.Fatalf("read under a released handle: %v", err)
	}
	if err := CheckReadLock(h.db, o); err != nil {
		t.Fatalf("read under a current handle: %v", err)
	}
}

func TestLockTxnCompare(t *testing.T) {
	h := newHarness(t)
	a := h.acquire("k", "a", 1, false).Handle
	run := func(hd *dkvpb.LockHandle) bool {
		res := h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: &dkvpb.TxnRequest{
			Compare: []*dkvpb.Compare{{Key: []byte("k"), Target: dkvpb.Compare_LOCK, Result: dkvpb.Compare_EQUAL,
				TargetUnion: &dkvpb.Compare_Lock{Lock: hd}}},
			Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("t"), Lock: hd}}}},
		}}})
		return res.Resp.(*dkvpb.TxnResponse).Succeeded
	}
	if !run(a) {
		t.Fatal("compare on the current handle failed")
	}
	h.release(a)
	if run(a) {
		t.Fatal("compare on a released handle held")
	}
}

func TestLockCancel(t *testing.T) {
	h := newHarness(t)
	a := h.acquire("k", "a", 1, false).Handle
	h.acquire("k", "w", 2, true)
	cancel := func(owner string) *dkvpb.LockCancelResponse {
		return h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockCancel{LockCancel: &dkvpb.LockCancelRequest{
			Key: []byte("k"), Owner: owner}}}).Resp.(*dkvpb.LockCancelResponse)
	}
	if r := cancel("w"); !r.Dequeued {
		t.Fatalf("cancel waiter: %v", r)
	}
	if r := h.release(a); r.Next != nil {
		t.Fatalf("cancelled waiter was granted: %v", r.Next)
	}
	// A waiter granted before its cancel applied releases by the cancel.
	h.acquire("k", "a2", 1, false)
	h.acquire("k", "w2", 2, true)
	h.release(h.holderOf("k"))
	if r := cancel("w2"); !r.Released {
		t.Fatalf("cancel of a granted waiter: %v", r)
	}
	if h.holderOf("k") != nil {
		t.Fatal("still held")
	}
}

// TestLockOwnLease: a lock acquired with a TTL gets its own lease, which
// release revokes (keys attached to it go too).
func TestLockOwnLease(t *testing.T) {
	h := newHarness(t)
	r := h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockAcquire{LockAcquire: &dkvpb.LockAcquireRequest{
		Key: []byte("k"), Owner: "a", TtlMs: 5000}}}).Resp.(*dkvpb.LockAcquireResponse)
	if !r.Acquired || r.Lease <= 9 {
		t.Fatalf("%v", r)
	}
	h.release(r.Handle)
	if _, ok := h.s.Begin(h.db.NewIndexedBatch()).getLease(r.Lease); ok {
		t.Fatal("the lock's own lease outlived the release")
	}
	bad := h.apply(acquireReq("k", "b", 12345, false))
	if dkverr.CodeOf(bad.Err) != dkverr.LeaseNotFound {
		t.Fatalf("acquire on a missing lease: %v", bad.Err)
	}
}

// TestLockManyWaitersFIFO: grants follow queue order exactly, whatever
// the mix of releases and expiries that causes them.
func TestLockManyWaitersFIFO(t *testing.T) {
	h := newHarness(t)
	first := h.acquire("k", "holder", 1, false).Handle
	const n = 300
	for i := 0; i < n; i++ {
		h.acquire("k", fmt.Sprintf("w%03d", i), int64(2+i%8), true)
	}
	cur := first
	for i := 0; i < n; i++ {
		rel := h.release(cur)
		want := fmt.Sprintf("w%03d", i)
		if rel.Next.GetOwner() != want {
			t.Fatalf("grant %d went to %v, want %s", i, rel.Next, want)
		}
		cur = rel.Next
	}
	if h.release(cur).Next != nil {
		t.Fatal("grant after the queue emptied")
	}
}

// TestLockEnforcedAfterReopen: a store opened over a database that holds a
// lock (a restart, or a snapshot installed underneath) still refuses a
// write without the handle to the locked key, by put, by range delete and
// in a txn, and accepts it with the handle.
func TestLockEnforcedAfterReopen(t *testing.T) {
	for _, how := range []string{"open", "reload"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t)
			g := h.acquire("k", "a", 1, false)
			if !g.Acquired {
				t.Fatalf("acquire: %v", g)
			}
			if err := h.putLocked("k", "v0", g.Handle); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "open":
				s, err := Open(h.db, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				h.s = s
			case "reload":
				// A snapshot from a member where "k" is locked installed
				// under a store that never saw the grant.
				fresh := newHarness(t)
				fresh.db, h.db = h.db, nil
				if err := fresh.s.Reload(fresh.db); err != nil {
					t.Fatal(err)
				}
				h = fresh
			}
			if err := h.putLocked("k", "v", nil); !isLocked(err) {
				t.Fatalf("put without handle after %s: %v, want Locked", how, err)
			}
			if res := h.apply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("z")})); !isLocked(res.Err) {
				t.Fatalf("range delete over the locked key after %s: %v, want Locked", how, res.Err)
			}
			if err := h.putLocked("k", "v", g.Handle); err != nil {
				t.Fatalf("put with the handle after %s: %v", how, err)
			}
		})
	}
}
