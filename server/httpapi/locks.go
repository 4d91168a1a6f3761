package httpapi

import (
	"bytes"
	"net/http"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lock"
)

// maxLocksListed bounds one GET /v1/locks answer.
const maxLocksListed = 1000

// LockListEntry is one held lock in GET /v1/locks. Keys are strings
// (JSON-escaped), as in the plain /v1/keys/ endpoint.
type LockListEntry struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Lease       int64  `json:"lease"`
	Token       int64  `json:"token"`
	RemainingMs int64  `json:"remaining_ms"`
	LastToken   int64  `json:"last_token"`
	// GrantedRevision is the store revision when the holder was granted
	// the lock, GrantedUnixMs the time the granting raft entry carried
	// (its proposer's clock); 0 when not recorded (a grant made before
	// this was, or by an entry without a time).
	GrantedRevision int64            `json:"granted_revision"`
	GrantedUnixMs   int64            `json:"granted_unix_ms"`
	Waiters         []LockListWaiter `json:"waiters"`
}

type LockListWaiter struct {
	Owner string `json:"owner"`
	Lease int64  `json:"lease"`
}

type LockListResponse struct {
	Revision int64           `json:"revision"`
	Locks    []LockListEntry `json:"locks"`
	More     bool            `json:"more"`
}

// Locks serves GET /v1/locks[?prefix=P][&limit=N][&store=S]: the held
// locks whose key starts with P, in key order, each with its holder,
// fencing token, remaining time and FIFO queue of waiters. Lock.Describe
// answers for one known key; this lists them (the dashboard's locks and
// elections pages). With auth on, only locks the caller may Describe are
// listed.
func (a *API) Locks(w http.ResponseWriter, r *http.Request) {
	a.serveList(w, r, maxLocksListed, a.listLocks)
}

// listLocks lists the held locks of GET /v1/locks.
func (a *API) listLocks(q listQuery) (any, error) {
	var keys [][]byte // physical: permissions apply to them
	err := q.view.HeldLocks(func(k []byte) {
		// The request's store's locks only: the default store's empty
		// prefix would also reach the named stores' keys.
		if _, own := q.store.Strip(k); own && bytes.HasPrefix(k, q.prefix) {
			keys = append(keys, append([]byte(nil), k...))
		}
	})
	if err != nil {
		return nil, dkverr.New(dkverr.Internal, "%v", err)
	}
	resp := LockListResponse{Locks: []LockListEntry{}}
	for _, k := range keys {
		if _, err := a.n.Authorize(q.ctx, dkvpb.Lock_Describe_FullMethodName, &dkvpb.LockDescribeRequest{Key: k}); err != nil {
			if c := dkverr.CodeOf(err); c == dkverr.Unauthenticated {
				return nil, a.n.WireError(err)
			}
			continue // not the caller's to see
		}
		if len(resp.Locks) == q.limit {
			resp.More = true
			break
		}
		st, err := q.view.DescribeLock(k)
		if err != nil {
			return nil, dkverr.New(dkverr.Internal, "%v", err)
		}
		if st.Holder == nil {
			continue
		}
		sk, _ := q.store.Strip(k) // k is the store's: the scan kept only its keys
		e := LockListEntry{Key: string(sk), Owner: st.Holder.Owner, Lease: st.Holder.Lease, Token: st.Holder.Token,
			LastToken: st.LastToken, Waiters: []LockListWaiter{}}
		grev, gns, ok, err := q.view.LockGrant(k)
		if err != nil {
			return nil, dkverr.New(dkverr.Internal, "%v", err)
		}
		if ok {
			e.GrantedRevision, e.GrantedUnixMs = grev, gns/1e6
		}
		if rem, ok := a.n.LeaseRemaining(st.Holder.Lease); ok {
			e.RemainingMs = rem.Milliseconds()
		}
		err = q.view.LockWaiters(k, func(wt lock.Waiter) bool {
			e.Waiters = append(e.Waiters, LockListWaiter{Owner: wt.Owner, Lease: wt.Lease})
			return len(e.Waiters) < maxLocksListed
		})
		if err != nil {
			return nil, dkverr.New(dkverr.Internal, "%v", err)
		}
		resp.Locks = append(resp.Locks, e)
	}
	resp.Revision = a.n.Revision()
	return resp, nil
}
