package server

import (
	"context"
	"errors"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/raftnode"
)

// renewer group-commits keep-alives: callers add lease ids to the open
// batch; one proposal at a time carries a whole batch.
type renewer struct {
	s    *Server
	mu   sync.Mutex
	cur  *renewBatch
	kick chan struct{}
}

type renewBatch struct {
	ids  []int64
	idx  map[int64]int
	done chan struct{}
	ttls []int64 // per ids[i]; 0: not found
	err  error
}

func newRenewer(s *Server) *renewer { return &renewer{s: s, kick: make(chan struct{}, 1)} }

// renew renews ids and returns each one's TTL in ms (0: not found), once
// the renewal is applied on this member.
func (r *renewer) renew(ctx context.Context, ids []int64) ([]int64, error) {
	r.mu.Lock()
	b := r.cur
	if b == nil {
		b = &renewBatch{idx: map[int64]int{}, done: make(chan struct{})}
		r.cur = b
	}
	for _, id := range ids {
		if _, ok := b.idx[id]; !ok {
			b.idx[id] = len(b.ids)
			b.ids = append(b.ids, id)
		}
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
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
		out[i] = b.ttls[b.idx[id]]
	}
	return out, nil
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
			resp, err := r.propose(b.ids)
			if err == nil && len(resp.GetTtlMs()) != len(b.ids) {
				err = dkverr.New(dkverr.Internal, "renew answered %d leases, asked %d", len(resp.GetTtlMs()), len(b.ids))
			}
			b.err = err
			if err == nil {
				b.ttls = resp.GetTtlMs()
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
func (r *renewer) propose(ids []int64) (*dkvpb.LeaseRenewResponse, error) {
	ctx, cancel := r.s.leaseCtx()
	defer cancel()
	req := &dkvpb.LeaseRenewRequest{Ids: ids}
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
