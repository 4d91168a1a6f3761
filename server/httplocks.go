package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lock"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// maxLocksListed bounds one GET /v1/locks answer.
const maxLocksListed = 1000

// lockListEntry is one held lock in GET /v1/locks. Keys are strings
// (JSON-escaped), as in the plain /v1/keys/ endpoint.
type lockListEntry struct {
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
	Waiters         []lockListWaiter `json:"waiters"`
}

type lockListWaiter struct {
	Owner string `json:"owner"`
	Lease int64  `json:"lease"`
}

type lockListResponse struct {
	Revision int64           `json:"revision"`
	Locks    []lockListEntry `json:"locks"`
	More     bool            `json:"more"`
}

// handleLocksHTTP serves GET /v1/locks[?prefix=P][&limit=N][&store=S]: the held
// locks whose key starts with P, in key order, each with its holder,
// fencing token, remaining time and FIFO queue of waiters. Lock.Describe
// answers for one known key; this lists them (the dashboard's locks and
// elections pages). With auth on, only locks the caller may Describe are
// listed.
func (s *Server) handleLocksHTTP(w http.ResponseWriter, r *http.Request) {
	s.serveList(w, r, maxLocksListed, s.listLocks)
}

// listLocks lists the held locks of GET /v1/locks.
func (s *Server) listLocks(q listQuery) (any, error) {
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
	resp := lockListResponse{Locks: []lockListEntry{}}
	for _, k := range keys {
		if _, err := s.checkCall(q.ctx, dkvpb.Lock_Describe_FullMethodName, &dkvpb.LockDescribeRequest{Key: k}); err != nil {
			if c := dkverr.CodeOf(err); c == dkverr.Unauthenticated {
				return nil, wireError(err)
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
		e := lockListEntry{Key: string(sk), Owner: st.Holder.Owner, Lease: st.Holder.Lease, Token: st.Holder.Token,
			LastToken: st.LastToken, Waiters: []lockListWaiter{}}
		grev, gns, ok, err := q.view.LockGrant(k)
		if err != nil {
			return nil, dkverr.New(dkverr.Internal, "%v", err)
		}
		if ok {
			e.GrantedRevision, e.GrantedUnixMs = grev, gns/1e6
		}
		if _, rem, ok := s.lessor.Remaining(st.Holder.Lease); ok {
			e.RemainingMs = rem.Milliseconds()
		}
		err = q.view.LockWaiters(k, func(wt lock.Waiter) bool {
			e.Waiters = append(e.Waiters, lockListWaiter{Owner: wt.Owner, Lease: wt.Lease})
			return len(e.Waiters) < maxLocksListed
		})
		if err != nil {
			return nil, dkverr.New(dkverr.Internal, "%v", err)
		}
		resp.Locks = append(resp.Locks, e)
	}
	resp.Revision = s.header(0).GetRevision()
	return resp, nil
}

// progressEntry is one member's replication progress as the leader sees it.
type progressEntry struct {
	ID        string `json:"id"` // decimal, as uint64 does not fit a JavaScript number
	Match     uint64 `json:"match"`
	Lag       uint64 `json:"lag"`
	Learner   bool   `json:"learner"`
	Active    bool   `json:"recent_active"`
	Replicate bool   `json:"replicating"`
}

type progressResponse struct {
	MemberID string          `json:"member_id"`
	IsLeader bool            `json:"is_leader"`
	Progress []progressEntry `json:"progress"`
}

// handleProgressHTTP serves GET /v1/cluster/progress: on the leader, each
// member's replicated (match) index and its lag behind the leader's last
// index; on another member, is_leader false and no progress (only the
// leader tracks it: ask the leader's HTTP port). With auth on it needs what MemberList needs.
func (s *Server) handleProgressHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := s.checkCall(httpAuthContext(r), dkvpb.Cluster_MemberList_FullMethodName, &dkvpb.MemberListRequest{}); err != nil {
		httpError(w, wireError(err))
		return
	}
	resp := progressResponse{MemberID: strconv.FormatUint(s.memberID, 10), Progress: []progressEntry{}}
	err := s.node.Inspect(r.Context(), func(rn *raft.RawNode) {
		if rn.BasicStatus().RaftState != raft.StateLeader {
			return
		}
		resp.IsLeader = true
		var last uint64
		rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id == s.memberID {
				last = pr.Match
			}
		})
		rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			resp.Progress = append(resp.Progress, progressEntry{ID: strconv.FormatUint(id, 10), Match: pr.Match,
				Lag: last - min(last, pr.Match), Learner: pr.IsLearner, Active: pr.RecentActive || id == s.memberID,
				Replicate: pr.State == tracker.StateReplicate})
		})
	})
	if err != nil {
		httpError(w, wireError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}
