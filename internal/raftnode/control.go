package raftnode

import (
	"context"
	"sync"

	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TransferLeadership asks the leader to hand leadership to id.
func (n *Node[R]) TransferLeadership(ctx context.Context, id uint64) error {
	select {
	case n.transfc <- id:
	case <-ctx.Done():
		return ctxErr(ctx, false)
	case <-n.stopc:
		return ErrStopped
	}
	for n.lead.Load() != id {
		ch := *n.leaderCh.Load()
		if n.lead.Load() == id {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return dkverr.New(dkverr.Unavailable, "leadership did not move to %x before the deadline", id)
		case <-n.stopc:
			return ErrStopped
		}
	}
	return nil
}

// WaitApplied returns once index has been applied locally.
func (n *Node[R]) WaitApplied(ctx context.Context, index uint64) error {
	for n.applied.Load() < index {
		ch := *n.appliedCh.Load()
		if n.applied.Load() >= index {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopc:
			return ErrStopped
		}
	}
	return nil
}

// Step hands a message received from a peer to raft.
func (n *Node[R]) Step(ctx context.Context, m *raftpb.Message) error {
	select {
	case n.recvc <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
}

// ReportUnreachable tells raft a peer could not be reached.
func (n *Node[R]) ReportUnreachable(id uint64) {
	n.report(func(rn *raft.RawNode) { rn.ReportUnreachable(id) })
}

// ReportSnapshot tells raft how sending a snapshot to id ended.
func (n *Node[R]) ReportSnapshot(id uint64, st raft.SnapshotStatus) {
	n.report(func(rn *raft.RawNode) { rn.ReportSnapshot(id, st) })
}

// Inspect runs f on the raft loop's goroutine (f must not block) and
// waits for it: the way to read leader-only state such as progress. When
// it returns an error, f has not run and never will: a caller gives up
// on a busy loop (ctx, Stop) without f later writing into the variables
// it reads.
func (n *Node[R]) Inspect(ctx context.Context, f func(rn *raft.RawNode)) error {
	var (
		mu        sync.Mutex
		abandoned bool
	)
	done := make(chan struct{})
	run := func(rn *raft.RawNode) {
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			return
		}
		f(rn)
		close(done)
	}
	// giveUp returns err unless f has run meanwhile, and makes sure it
	// does not run after.
	giveUp := func(err error) error {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-done:
			return nil
		default:
		}
		abandoned = true
		return err
	}
	select {
	case n.reportc <- run:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return giveUp(ctx.Err())
	case <-n.stopc:
		return giveUp(ErrStopped)
	}
}

func (n *Node[R]) report(f func(*raft.RawNode)) {
	select {
	case n.reportc <- f:
	case <-n.stopc:
	}
}

// Status is a snapshot of raft's view, for Status calls and metrics.
type Status struct {
	ID, Lead, Term, Commit, Applied uint64
	IsLeader                        bool
	ConfState                       *raftpb.ConfState
}

// Status reports the node's raft state without touching the loop.
func (n *Node[R]) Status() Status {
	return Status{
		ID: n.cfg.ID, Lead: n.lead.Load(), Term: n.term.Load(),
		Commit: n.committed.Load(), Applied: n.applied.Load(),
		IsLeader: n.isLeader.Load(), ConfState: n.confState.Load(),
	}
}

// Stats exposes counters.
func (n *Node[R]) Stats() *Stats { return &n.stats }

// LeaderChanged returns a channel closed at the next leader change.
func (n *Node[R]) LeaderChanged() <-chan struct{} { return *n.leaderCh.Load() }
