package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/raftnode"
)

// renewer group-commits keep-alives: callers add lease ids to the open
// batch; one proposal at a time carries a whole batch.
type renewer struct {
	s    *Server
	mu   sync.Mutex
	cur  *renewBatch
	kick chan struct{}
	// fromMemory and throughRaft count the leases whose keep-alive was
	// answered from memory and after a raft round (/metrics).
	fromMemory, throughRaft atomic.Uint64
}

type renewBatch struct {
	ids []int64
	// users[i] is the user who asked to renew ids[i] ("" with auth
	// disabled): apply renews a lease only for its owner or root.
	users  []string
	idx    map[renewKey]int
	done   chan struct{}
	ttls   []int64 // per ids[i]; 0: not found
	denied []bool  // per ids[i], or nil: none denied
	err    error
}

type renewKey struct {
	id   int64
	user string
}

func newRenewer(s *Server) *renewer { return &renewer{s: s, kick: make(chan struct{}, 1)} }

// renew renews ids for the caller of ctx and returns each one's TTL in ms
// (0: not found), once the renewal is applied on this member. A lease the
// caller does not own (with auth enabled) fails the call with
// PermissionDenied.
func (r *renewer) renew(ctx context.Context, ids []int64) ([]int64, error) {
	user := ""
	if u := callerUser(ctx); u != nil {
		user = u.Name
	}
	if user == "" {
		// Auth is off, so ownership is not in question: a lease this
		// member renewed through raft moments ago is acknowledged from
		// memory, and recorded again in the background
		// (lease.Lessor.SetRenewWindow).
		if ttls, refresh, ok := r.s.lessor.RenewLocal(ids); ok {
			if len(refresh) > 0 {
				r.add(refresh, user)
			}
			r.fromMemory.Add(uint64(len(ids)))
			return ttls, nil
		}
	}
	r.throughRaft.Add(uint64(len(ids)))
	b := r.add(ids, user)
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.s.stopc:
		return nil, dkverr.New(dkverr.Unavailable, "node is shutting down")
	}
	if b.err != nil {
		return nil, b.err
	}
	out := make([]int64, len(ids))
	for i, id := range ids {
		j := b.idx[renewKey{id, user}]
		if b.denied != nil && b.denied[j] {
			return nil, r.denied(user, id)
		}
		out[i] = b.ttls[j]
	}
	return out, nil
}

// add puts ids in the open batch, for user, and wakes the loop.
func (r *renewer) add(ids []int64, user string) *renewBatch {
	r.mu.Lock()
	b := r.cur
	if b == nil {
		b = &renewBatch{idx: map[renewKey]int{}, done: make(chan struct{})}
		r.cur = b
	}
	for _, id := range ids {
		k := renewKey{id, user}
		if _, ok := b.idx[k]; !ok {
			b.idx[k] = len(b.ids)
			b.ids = append(b.ids, id)
			b.users = append(b.users, user)
		}
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return b
}

// denied is the refusal of user's keep-alive of lease id, which apply
// found it does not own.
func (r *renewer) denied(user string, id int64) error {
	rec, _, _ := r.s.applied().Latest().Lease(id) // for the message only
	return lease.Denied(user, id, rec.Owner, "keep alive")
}

func (r *renewer) loop() {
	defer r.s.wg.Done()
	for {
		select {
		case <-r.s.stopc:
			return
		case <-r.kick:
		}
		for {
			r.mu.Lock()
			b := r.cur
			r.cur = nil
			r.mu.Unlock()
			if b == nil {
				break
			}
			proposedAt := r.s.lessor.Now() // before the proposal: the safe side
			resp, err := r.propose(b.ids, b.users)
			if err == nil && (len(resp.GetTtlMs()) != len(b.ids) || resp.Denied != nil && len(resp.Denied) != len(b.ids)) {
				err = dkverr.New(dkverr.Internal, "renew answered %d leases, asked %d", len(resp.GetTtlMs()), len(b.ids))
			}
			b.err = err
			if err == nil {
				b.ttls, b.denied = resp.GetTtlMs(), resp.GetDenied()
				if !slices.ContainsFunc(b.users, func(u string) bool { return u != "" }) {
					r.s.lessor.RenewApplied(b.ids, b.ttls, proposedAt)
				}
			}
			close(b.done)
		}
	}
}

// renewAttempt bounds one attempt to commit a renewal. A renewal normally
// commits in one raft round; an attempt that takes longer was most likely
// forwarded to a leader that died, and raft does not report such a loss.
const renewAttempt = time.Second

// propose commits a renewal, retrying on a leader change or after
// renewAttempt (renewing twice is harmless), for up to leaseProposeTimeout:
// a member that forwarded a renewal to a dead leader must not sit on its
// clients' keep-alives until their leases run out.
func (r *renewer) propose(ids []int64, users []string) (*dkvpb.LeaseRenewResponse, error) {
	ctx, cancel := r.s.leaseCtx()
	defer cancel()
	req := &dkvpb.LeaseRenewRequest{Ids: ids}
	if slices.ContainsFunc(users, func(u string) bool { return u != "" }) {
		req.Users = users // none with auth disabled: the entry stays as it was
	}
	for {
		changed := r.s.node.LeaderChanged()
		actx, acancel := context.WithTimeout(ctx, renewAttempt)
		go func() {
			select {
			case <-changed:
				acancel()
			case <-actx.Done():
			}
		}()
		resp, err := propose[*dkvpb.LeaseRenewResponse](actx, r.s, &dkvpb.InternalRequest{
			Request: &dkvpb.InternalRequest_LeaseRenew{LeaseRenew: req},
		})
		acancel()
		if err == nil || ctx.Err() != nil || dkverr.CodeOf(err) != dkverr.Unavailable && !isUnknown(err) {
			return resp, err
		}
		select {
		case <-r.s.stopc:
			return nil, err
		default:
		}
	}
}

// isUnknown reports whether err leaves the renewal's outcome unknown (the
// attempt timed out or its leader changed): worth another attempt.
func isUnknown(err error) bool {
	return errors.Is(err, raftnode.ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
