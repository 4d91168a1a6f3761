package raftnode

import (
	"context"
	"encoding/binary"

	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/raft/v3"
)

// readWaiter is one linearizable read; done is closed to release it.
type readWaiter struct {
	done chan struct{}
}

// WaitLinearizable returns once this node has applied everything committed
// before the call: a read of local state after it is linearizable.
func (n *Node[R]) WaitLinearizable(ctx context.Context) error {
	w := &readWaiter{done: make(chan struct{})}
	select {
	case n.readc <- w:
	case <-ctx.Done():
		return ctxErr(ctx, false)
	case <-n.stopc:
		return ErrStopped
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return dkverr.New(dkverr.Unavailable, "linearizable read: no quorum confirmed before the deadline")
	case <-n.stopc:
		return ErrStopped
	}
}

// readBatcher batches linearizable reads into ReadIndex rounds; only the
// raft loop touches it. Readers that arrive while a round is in flight
// wait for the next one, so one round (one heartbeat to a quorum) serves
// every read waiting at that moment. A round answered by raft waits until
// the applied index reaches its read index; a round raft never answers
// (no leader, a lost message) is retried with a fresh request id after an
// election timeout's worth of ticks.
type readBatcher struct {
	queued   []*readWaiter // readers waiting for the next round
	inflight *readRound    // the round raft is working on
	waiting  []pendingRead // rounds answered, waiting for apply
	seq      uint64        // fresh id per round
	ticks    uint64        // ticks seen, the clock for retries
	// retryTicks is how many ticks an unanswered round may take.
	retryTicks uint64
}

// readRound is one in-flight ReadIndex request and the readers it serves.
type readRound struct {
	id      []byte
	readers []*readWaiter
	sentAt  uint64 // readBatcher.ticks when it was started
}

// pendingRead is a round raft answered: its readers are released once
// index is applied.
type pendingRead struct {
	index   uint64
	readers []*readWaiter
}

// add queues a reader for the next round.
func (b *readBatcher) add(r *readWaiter) { b.queued = append(b.queued, r) }

// tick advances the retry clock and requeues a round that has waited
// more than retryTicks for its answer.
func (b *readBatcher) tick() {
	b.ticks++
	if b.inflight != nil && b.ticks-b.inflight.sentAt > b.retryTicks {
		// Lost (no leader, dropped message): retry with a new id.
		b.queued = append(b.inflight.readers, b.queued...)
		b.inflight = nil
	}
}

// due reports whether a round should start: readers are queued and no
// round is in flight.
func (b *readBatcher) due() bool { return b.inflight == nil && len(b.queued) > 0 }

// start makes every queued reader a new round and returns its request id;
// uid is unique across the cluster and restarts (Node.NextID).
func (b *readBatcher) start(uid uint64) []byte {
	b.seq++
	id := make([]byte, 16)
	binary.BigEndian.PutUint64(id, uid)
	binary.BigEndian.PutUint64(id[8:], b.seq)
	b.inflight = &readRound{id: id, readers: b.queued, sentAt: b.ticks}
	b.queued = nil
	return id
}

// answered takes raft's answers: the in-flight round's read index.
func (b *readBatcher) answered(states []raft.ReadState) {
	for _, rs := range states {
		if b.inflight != nil && string(rs.RequestCtx) == string(b.inflight.id) {
			b.waiting = append(b.waiting, pendingRead{index: rs.Index, readers: b.inflight.readers})
			b.inflight = nil
		}
	}
}

// release frees the readers of every answered round at or below applied.
func (b *readBatcher) release(applied uint64) {
	kept := b.waiting[:0]
	for _, pr := range b.waiting {
		if pr.index <= applied {
			for _, r := range pr.readers {
				close(r.done)
			}
			continue
		}
		kept = append(kept, pr)
	}
	b.waiting = kept
}
