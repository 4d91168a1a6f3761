package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/raft/v3"
)

// proposal is one command on its way into raft; errc says whether raft
// took it (nil) or dropped it.
type proposal struct {
	data []byte
	errc chan error
}

// waiters matches applied entries to the proposers waiting on their ids:
// the proposal tracker. Propose registers before handing its command to
// raft and forgets on return; the apply goroutine delivers.
type waiters[R any] struct {
	mu sync.Mutex
	m  map[uint64]chan R
}

// add registers a proposer waiting for id's result.
func (w *waiters[R]) add(id uint64) chan R {
	ch := make(chan R, 1)
	w.mu.Lock()
	w.m[id] = ch
	w.mu.Unlock()
	return ch
}

// remove forgets id's proposer (delivered or given up).
func (w *waiters[R]) remove(id uint64) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

// deliver hands each applied entry's result to its proposer, if one is
// waiting on this member.
func (w *waiters[R]) deliver(done []applied[R]) {
	if len(done) == 0 {
		return
	}
	w.mu.Lock()
	for _, d := range done {
		if ch, ok := w.m[d.id]; ok {
			// Never block the apply goroutine on a caller: each waiter
			// gets one result and is then forgotten.
			delete(w.m, d.id)
			select {
			case ch <- d.res:
			default:
			}
		}
	}
	w.mu.Unlock()
}

// applied is the result of one applied entry that carried a proposal id.
type applied[R any] struct {
	id  uint64
	res R
}

// ErrStopped is returned by calls on a stopped node.
var ErrStopped = dkverr.New(dkverr.Unavailable, "node is shutting down")

// Propose replicates data, the encoded command carrying proposal id id,
// and waits for the result of applying it. While there is no
// leader the proposal is retried until ctx ends (Unavailable). A ctx that
// ends after the proposal was handed to raft leaves the outcome unknown.
func (n *Node[R]) Propose(ctx context.Context, id uint64, data []byte) (R, error) {
	return n.propose(ctx, id, data, false)
}

// ProposeIdempotent is Propose for a command that applies at most once
// however often it is proposed (a write in a client session): when the
// leader changes while it is pending, it is proposed again to the new
// leader at once, instead of waiting to see whether the first copy
// survived.
func (n *Node[R]) ProposeIdempotent(ctx context.Context, id uint64, data []byte) (R, error) {
	return n.propose(ctx, id, data, true)
}

func (n *Node[R]) propose(ctx context.Context, id uint64, data []byte, resend bool) (R, error) {
	var zero R
	if id == 0 {
		return zero, errors.New("raftnode: proposal without an id")
	}
	ch := n.waiters.add(id)
	defer n.waiters.remove(id)
	n.stats.Proposals.Add(1)
	start := time.Now()
	var changed <-chan struct{}
	for {
		p := &proposal{data: data, errc: make(chan error, 1)}
		changed = n.LeaderChanged()
		n.stats.PendingProps.Add(1)
		select {
		case n.propc <- p:
		case <-ctx.Done():
			n.stats.PendingProps.Add(-1)
			return zero, ctxErr(ctx, false)
		case <-n.stopc:
			n.stats.PendingProps.Add(-1)
			return zero, ErrStopped
		}
		var perr error
		select {
		case perr = <-p.errc:
		case <-ctx.Done():
			return zero, ctxErr(ctx, true)
		case <-n.stopc:
			return zero, ErrStopped
		}
		if perr == nil {
			break
		}
		if !errors.Is(perr, raft.ErrProposalDropped) {
			return zero, perr
		}
		// Dropped: no leader known right now. Wait for one, then retry.
		n.stats.ProposalsDrop.Add(1)
		if err := n.waitLeaderChange(ctx); err != nil {
			return zero, err
		}
	}
	// A proposal can be lost with a leader that fails or is cut off (a
	// follower forwards it, and raft never reports the loss). Once a new
	// leader is known, one that survived is applied promptly; after
	// lostProposalGrace more the outcome is reported unknown, instead of
	// holding the caller until its deadline.
	var (
		giveUp <-chan time.Time
		timer  *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case res := <-ch:
			n.stats.ProposalSeconds.Observe(time.Since(start).Seconds())
			return res, nil
		case <-changed:
			changed = n.LeaderChanged()
			if n.lead.Load() == 0 {
				giveUp = nil // an election is under way: wait for its leader
				continue
			}
			if resend {
				// The first copy may be lost with the old leader; a second
				// applies only if the first did not.
				p := &proposal{data: data, errc: make(chan error, 1)}
				n.stats.PendingProps.Add(1)
				n.stats.ProposalsResent.Add(1)
				select {
				case n.propc <- p:
				case <-ctx.Done():
					n.stats.PendingProps.Add(-1)
					return zero, ctxErr(ctx, true)
				case <-n.stopc:
					n.stats.PendingProps.Add(-1)
					return zero, ErrStopped
				}
			}
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(n.lostProposalGrace())
			giveUp = timer.C
		case <-giveUp:
			n.stats.ProposalsUnknown.Add(1)
			return zero, fmt.Errorf("%w: the raft leader changed while it was pending, and it was not applied within %v of a new leader being known", ErrUnknownOutcome, n.lostProposalGrace())
		case <-ctx.Done():
			return zero, ctxErr(ctx, true)
		case <-n.stopc:
			return zero, ErrStopped
		}
	}
}

// lostProposalGrace is how long after a new leader is known a proposal
// pending across the change may still be applied before it is reported
// with an unknown outcome: two election timeouts.
func (n *Node[R]) lostProposalGrace() time.Duration {
	return 2 * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
}

func (n *Node[R]) waitLeaderChange(ctx context.Context) error {
	ch := *n.leaderCh.Load()
	if n.lead.Load() != raft.None {
		// A leader is known but dropped it (e.g. transferring): back off.
		t := time.NewTimer(n.cfg.TickInterval)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctxErr(ctx, false)
		case <-n.stopc:
			return ErrStopped
		}
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx, false)
	case <-n.stopc:
		return ErrStopped
	}
}

// ErrUnknownOutcome marks a write whose deadline passed after it was handed
// to raft: it may or may not have been applied.
var ErrUnknownOutcome = errors.New("outcome unknown: the request may or may not have been applied")

func ctxErr(ctx context.Context, sent bool) error {
	if sent {
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, ctx.Err())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return dkverr.New(dkverr.Unavailable, "no raft leader before the deadline")
	}
	return ctx.Err()
}

// ProposeConfChange proposes a membership change and waits until it is
