package mvcc

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/lock"
)

var lockSeed = flag.Uint64("lock-seed", 0, "seed for TestLockModel (0: from the clock)")

// lockModel is a dumb reference for the lock table: per key a holder and
// a FIFO queue of waiters, and a set of live leases.
type lockModel struct {
	holder map[string]*modelEntry
	queue  map[string][]*modelEntry
	leases map[int64]bool
}

type modelEntry struct {
	owner string
	lease int64
	token int64 // holders only, from the real store
}

func (m *lockModel) release(key string) (next *modelEntry) {
	delete(m.holder, key)
	if q := m.queue[key]; len(q) > 0 {
		next, m.queue[key] = q[0], q[1:]
		m.holder[key] = next
	}
	return next
}

func (m *lockModel) revoke(id int64) {
	delete(m.leases, id)
	for k, q := range m.queue {
		m.queue[k] = slices.DeleteFunc(q, func(e *modelEntry) bool { return e.lease == id })
	}
	for k, h := range m.holder {
		if h.lease == id {
			m.release(k)
		}
	}
}

// TestLockModel applies random lock, lease and write commands to the store
// and to lockModel and requires the same holders, queues and write
// outcomes; tokens must grow per key. Replay a failure with -lock-seed.
func TestLockModel(t *testing.T) {
	seed := *lockSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -lock-seed=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0))
	h := newHarness(t) // leases 1-9 exist
	m := &lockModel{holder: map[string]*modelEntry{}, queue: map[string][]*modelEntry{}, leases: map[int64]bool{}}
	for id := int64(1); id <= 9; id++ {
		m.leases[id] = true
	}
	keys := []string{"a", "b", "c"}
	lastToken := map[string]int64{}
	var stale []*dkvpb.LockHandle // every handle ever granted
	owners := 0
	for step := 0; step < 3000; step++ {
		key := keys[r.IntN(len(keys))]
		what := ""
		switch op := r.IntN(100); {
		case op < 35: // acquire, maybe waiting, on a random (maybe dead) lease
			owners++
			owner := fmt.Sprintf("o%d", owners)
			id := int64(1 + r.IntN(4))
			wait := r.IntN(3) > 0
			what = fmt.Sprintf("acquire %s %s lease %d wait %v", key, owner, id, wait)
			res := h.apply(acquireReq(key, owner, id, wait))
			if !m.leases[id] {
				if !isLeaseNotFound(res.Err) {
					t.Fatalf("seed %d step %d %s: %v, want LeaseNotFound", seed, step, what, res.Err)
				}
				break
			}
			resp := res.Resp.(*dkvpb.LockAcquireResponse)
			switch {
			case m.holder[key] == nil:
				if !resp.Acquired {
					t.Fatalf("seed %d step %d %s: free lock not granted: %v", seed, step, what, resp)
				}
				m.holder[key] = &modelEntry{owner: owner, lease: id, token: resp.Handle.Token}
			case wait:
				if !resp.Queued {
					t.Fatalf("seed %d step %d %s: not queued: %v", seed, step, what, resp)
				}
				m.queue[key] = append(m.queue[key], &modelEntry{owner: owner, lease: id})
			default:
				if resp.Acquired || resp.Queued {
					t.Fatalf("seed %d step %d %s: %v, want held", seed, step, what, resp)
				}
			}
		case op < 55: // release the current holder, or a stale handle
			hd := h.holderOf(key)
			if hd == nil || (len(stale) > 0 && r.IntN(3) == 0) {
				if len(stale) == 0 {
					continue
				}
				hd = stale[r.IntN(len(stale))]
			}
			what = fmt.Sprintf("release %s token %d", hd.Key, hd.Token)
			cur := m.holder[string(hd.Key)]
			resp := h.release(hd)
			want := cur != nil && cur.token == hd.Token
			if resp.Released != want {
				t.Fatalf("seed %d step %d %s: released %v, want %v", seed, step, what, resp.Released, want)
			}
			if want {
				m.release(string(hd.Key))
			}
		case op < 65: // a waiter (or the holder) gives up
			q := m.queue[key]
			var e *modelEntry
			if len(q) > 0 && r.IntN(4) > 0 {
				e = q[r.IntN(len(q))]
			} else if m.holder[key] != nil {
				e = m.holder[key]
			} else {
				continue
			}
			what = fmt.Sprintf("cancel %s %s", key, e.owner)
			h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockCancel{LockCancel: &dkvpb.LockCancelRequest{Key: []byte(key), Owner: e.owner}}})
			if i := slices.Index(q, e); i >= 0 {
				m.queue[key] = slices.Delete(q, i, i+1)
			} else {
				m.release(key)
			}
		case op < 72: // a lease ends (revoke or expiry), then is granted again
			id := int64(1 + r.IntN(4))
			what = fmt.Sprintf("revoke lease %d", id)
			if m.leases[id] {
				h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: id}}})
				m.revoke(id)
			} else {
				h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: 60_000}}})
				m.leases[id] = true
			}
		case op < 75: // the member restarts: a new Store over the same database
			what = "reopen"
			s, err := Open(h.db, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			h.s = s
		default: // a write: unguarded, with the current handle, or a stale one
			var hd *dkvpb.LockHandle
			switch r.IntN(3) {
			case 0:
				hd = h.holderOf(keys[r.IntN(len(keys))])
			case 1:
				if len(stale) > 0 {
					hd = stale[r.IntN(len(stale))]
				}
			}
			what = fmt.Sprintf("put %s under %v", key, hd)
			err := h.putLocked(key, "v", hd)
			ok := true
			if hd != nil {
				cur := m.holder[string(hd.Key)]
				ok = cur != nil && cur.token == hd.Token
			}
			if cur := m.holder[key]; cur != nil && (hd == nil || string(hd.Key) != key) {
				ok = false
			}
			if ok != (err == nil) || (err != nil && !isLocked(err)) {
				t.Fatalf("seed %d step %d %s: %v, want ok=%v", seed, step, what, err, ok)
			}
		}
		// Compare the whole table, learn new grants' tokens.
		for _, k := range keys {
			st, err := DescribeLock(h.db, []byte(k))
			if err != nil {
				t.Fatal(err)
			}
			mh := m.holder[k]
			if (st.Holder == nil) != (mh == nil) || (mh != nil && st.Holder.Owner != mh.owner) {
				t.Fatalf("seed %d step %d after %s: key %s holder %v, model %+v", seed, step, what, k, st.Holder, mh)
			}
			// The store's in-memory set of locked keys, which lets a write
			// skip the lock table, must say exactly what the table says.
			if _, in := h.s.held[k]; in != (st.Holder != nil) {
				t.Fatalf("seed %d step %d after %s: key %s in the locked-key set %v, holder %v", seed, step, what, k, in, st.Holder)
			}
			if st.Queue != int64(len(m.queue[k])) {
				t.Fatalf("seed %d step %d after %s: key %s queue %d, model %d", seed, step, what, k, st.Queue, len(m.queue[k]))
			}
			if mh != nil && mh.token == 0 {
				mh.token = st.Holder.Token
			}
			if mh != nil && st.Holder.Token != mh.token {
				t.Fatalf("seed %d step %d: key %s token changed under the same holder", seed, step, k)
			}
			if st.LastToken < lastToken[k] {
				t.Fatalf("seed %d step %d: key %s last token went back %d -> %d", seed, step, k, lastToken[k], st.LastToken)
			}
			if st.Holder != nil && st.Holder.Token > lastToken[k] {
				stale = append(stale, st.Holder)
			}
			lastToken[k] = st.LastToken
			// A holder marked NoWaiters lets its release skip the queue
			// and the lease index read: the mark must never hide a waiter.
			if hr, ok, err := lock.GetHolder(h.db, []byte(k)); err != nil {
				t.Fatal(err)
			} else if ok && hr.NoWaiters && len(m.queue[k]) > 0 {
				t.Fatalf("seed %d step %d after %s: key %s holder marked NoWaiters with %d waiters", seed, step, what, k, len(m.queue[k]))
			}
		}
		// The Store's copy of the lease records is the lease table.
		for id := int64(1); id <= 9; id++ {
			rec, ok, err := lease.Get(h.db, id)
			if err != nil {
				t.Fatal(err)
			}
			if c, in := h.s.leaseRecs[id]; in != ok || c != rec {
				t.Fatalf("seed %d step %d after %s: lease %d copy %+v (%v), table %+v (%v)", seed, step, what, id, c, in, rec, ok)
			}
		}
		// The lease index names exactly the keys each lease holds or
		// waits on.
		for id := int64(1); id <= 4; id++ {
			got, err := lock.LeaseKeys(h.db, id)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, k := range keys {
				in := m.holder[k] != nil && m.holder[k].lease == id
				for _, e := range m.queue[k] {
					in = in || e.lease == id
				}
				if in {
					want = append(want, k)
				}
			}
			var gotS []string
			for _, k := range got {
				gotS = append(gotS, string(k))
			}
			if !slices.Equal(gotS, want) {
				t.Fatalf("seed %d step %d after %s: lease %d index %q, model %q", seed, step, what, id, gotS, want)
			}
		}
	}
}

func isLeaseNotFound(err error) bool { return dkverr.CodeOf(err) == dkverr.LeaseNotFound }
