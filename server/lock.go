package server

import (
	"context"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/state"
)

// Locks, server side (see docs/locks.md). Every lock command is a raft
// proposal; the state machine (internal/state, through
// internal/mvcc/lock.go) keeps holders and FIFO queues and enforces locks
// on writes. A waiting Acquire blocks in
// the member that received it until the member applies the grant: every
// member applies every grant, so it learns of it locally (lockWaiters),
// with a periodic look at the lock table as a safety net (after a
// snapshot install, say). When the caller gives up, the member proposes a
// LockCancel so the waiter leaves the queue (or releases a lock granted
// in the meantime). The Lock service is in grpcapi/lock.go; the waiters
// and the cancel, which outlives the call, are the node's.

// lockCancelTimeout bounds the LockCancel a failed wait proposes.
const lockCancelTimeout = 5 * time.Second

// lockWaiters wakes waiting Acquire calls when their grant is applied.
// The zero value is ready to use.
type lockWaiters struct {
	mu sync.Mutex
	m  map[string]chan *dkvpb.LockHandle
}

func waiterKey(key []byte, owner string) string { return string(key) + "\x00" + owner }

func (w *lockWaiters) register(key []byte, owner string) (<-chan *dkvpb.LockHandle, func()) {
	k := waiterKey(key, owner)
	ch := make(chan *dkvpb.LockHandle, 1)
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]chan *dkvpb.LockHandle)
	}
	w.m[k] = ch
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		if w.m[k] == ch {
			delete(w.m, k)
		}
		w.mu.Unlock()
	}
}

// notify hands applied grants to their waiters; results are the apply
// results of one committed batch.
func (w *lockWaiters) notify(results []state.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return
	}
	for _, res := range results {
		for _, g := range res.Effects.Locks {
			if ch, ok := w.m[waiterKey(g.Key, g.Owner)]; ok {
				select {
				case ch <- g:
				default:
				}
			}
		}
	}
}

// cancelLockWait takes a waiter that gave up out of its queue (or releases
// the lock if it was granted meanwhile), in the background.
func (s *Server) cancelLockWait(key []byte, owner string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(memberCall(context.Background()), lockCancelTimeout)
		defer cancel()
		go func() {
			select {
			case <-s.stopc:
				cancel()
			case <-ctx.Done():
			}
		}()
		if _, err := propose[*dkvpb.LockCancelResponse](ctx, s, &dkvpb.InternalRequest{TimeUnixNano: time.Now().UnixNano(), Request: &dkvpb.InternalRequest_LockCancel{
			LockCancel: &dkvpb.LockCancelRequest{Key: key, Owner: owner}}}); err != nil {
			s.log.Debug("lock cancel failed; the waiter's lease will clear it", "key", string(key), "err", err)
		}
	}()
}
