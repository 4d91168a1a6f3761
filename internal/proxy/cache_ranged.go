package proxy

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc/metadata"
)

// Range watches: the read cache of an identity that may not watch the
// whole keyspace (its keyspace watch was refused with PermissionDenied)
// keeps each cached range current with an upstream watch of that range
// alone, all on one upstream Watch stream per identity, with the
// identity's metadata, so the member checks that very token for that
// range.
//
// Invariants, besides cache.go's:
//
//   - An entry read at revision R is stored with the watch of its range;
//     a new watch starts at R+1, and an entry is stored under an existing
//     one only if R is no older than what that watch has delivered. So
//     every event after R in the range reaches the cache and drops the
//     entry.
//   - An entry is answered only once the member has created its watch
//     (it will deliver those events), at max(R, what the watch has
//     delivered).
//   - A watch lives as long as entries of its range do: the last one's
//     removal (an event, the LRU bound, a refusal) cancels it upstream.
//     An identity holds at most maxRangeWatches; a read of another range
//     beyond that is not cached.
//   - When the stream fails, every entry of the identity is dropped and
//     its watches forgotten; the next entry stored opens a new stream.
//     Requests go out on the stream in the order they were queued, so a
//     cancel never overtakes its create.

// maxRangeWatches bounds the range watches of one identity.
const maxRangeWatches = 256

// rangeWatch is one upstream watch of a cached range.
type rangeWatch struct {
	id      int64
	r       keyRange
	rev     int64 // every event of r <= rev has dropped the entries it touches
	synced  bool  // the member created it
	gone    bool  // cancelled, or its stream ended
	entries map[*entry]struct{}
}

// rangeWatches is a ranged identity's watches, under the cache's mu.
type rangeWatches struct {
	byRange map[keyRange]*rangeWatch
	byID    map[int64]*rangeWatch
	nextID  int64
	out     []*dkvpb.WatchRequest // to send, in order
	kick    chan struct{}         // something was queued
}

func (rw *rangeWatches) init() {
	rw.byRange, rw.byID, rw.kick = map[keyRange]*rangeWatch{}, map[int64]*rangeWatch{}, make(chan struct{}, 1)
}

func (rw *rangeWatches) queueLocked(req *dkvpb.WatchRequest) {
	rw.out = append(rw.out, req)
	select {
	case rw.kick <- struct{}{}:
	default:
	}
}

// watchLocked is the watch an entry of r read at rev is stored with,
// created if needed; nil if the entry may not be stored.
func (rw *rangeWatches) watchLocked(r keyRange, rev int64) *rangeWatch {
	if w := rw.byRange[r]; w != nil {
		if rev < w.rev {
			return nil // the watch already handled events newer than the entry
		}
		return w
	}
	if len(rw.byRange) >= maxRangeWatches {
		return nil
	}
	rw.nextID++
	w := &rangeWatch{id: rw.nextID, r: r, rev: rev, entries: map[*entry]struct{}{}}
	rw.byRange[r], rw.byID[w.id] = w, w
	cr := &dkvpb.WatchCreateRequest{Key: []byte(r.start), StartRevision: rev + 1, WatchId: w.id}
	if !r.single {
		cr.RangeEnd = []byte(r.end) // "\x00": every key from start, as for a read
	}
	rw.queueLocked(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: cr}})
	return w
}

// releaseLocked takes e off its watch, cancelling the watch with its
// last entry.
func (rw *rangeWatches) releaseLocked(e *entry) {
	w := e.w
	delete(w.entries, e)
	if len(w.entries) > 0 || w.gone {
		return
	}
	w.gone = true
	delete(rw.byRange, w.r)
	delete(rw.byID, w.id)
	rw.queueLocked(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CancelRequest{CancelRequest: &dkvpb.WatchCancelRequest{WatchId: w.id}}})
}

// forgetLocked drops w and its entries without cancelling it upstream
// (the member did, or the stream is gone).
func (rw *rangeWatches) forgetLocked(c *readCache, w *rangeWatch) {
	w.gone = true
	delete(rw.byRange, w.r)
	delete(rw.byID, w.id)
	for e := range w.entries {
		c.removeLocked(e)
	}
}

// runRanged keeps the identity's range watches' stream open while it
// has watches, until its state is dropped.
func (s *identCache) runRanged(ctx context.Context) {
	c := s.c
	var b backoff
	for {
		// A stream is opened for the first watch, not before.
		for {
			c.mu.Lock()
			n := len(s.rw.byRange)
			c.mu.Unlock()
			if n > 0 {
				break
			}
			select {
			case <-s.rw.kick:
			case <-ctx.Done():
				return
			}
		}
		answered, err := s.rangedStream(ctx)
		c.mu.Lock()
		s.asking = false
		for _, w := range s.rw.byID {
			s.rw.forgetLocked(c, w)
		}
		s.rw.out = nil
		refused := ctx.Err() == nil && !retryable(err)
		if refused {
			s.refused = time.Now().Add(refusedFor)
		}
		c.mu.Unlock()
		if ctx.Err() != nil || refused {
			if refused {
				c.p.log.Info("read cache off for an identity whose range watches were refused", "err", err)
			}
			return
		}
		if answered {
			b.reset()
		}
		if !sleep(ctx, b.next()) {
			return
		}
	}
}

// rangedStream runs one upstream stream of range watches; it reports
// whether the member answered anything on it.
func (s *identCache) rangedStream(ctx context.Context) (bool, error) {
	c := s.c
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, s.md))
	up, err := dkvpb.NewWatchClient(c.p.conn).Watch(ctx)
	if err != nil {
		cancel()
		return false, err
	}
	sent := make(chan struct{})
	defer func() {
		// The sender is gone before the caller forgets this stream's
		// watches, so it cannot take a request meant for the next.
		cancel()
		<-sent
	}()
	go func() {
		defer close(sent)
		for {
			c.mu.Lock()
			out := s.rw.out
			s.rw.out = nil
			c.mu.Unlock()
			for _, req := range out {
				if up.Send(req) != nil {
					return // Recv below has the error
				}
			}
			select {
			case <-s.rw.kick:
			case <-ctx.Done():
				return
			}
		}
	}()
	answered := false
	for {
		resp, err := up.Recv()
		if err != nil {
			return answered, err
		}
		answered = true
		rev := resp.GetHeader().GetRevision()
		c.mu.Lock()
		w := s.rw.byID[resp.WatchId]
		if resp.Canceled || resp.Created {
			// The set of watches changed: a progress request may have
			// found none to answer for, so let the next one go out.
			s.asking = false
		}
		switch {
		case resp.Canceled:
			// Refused or ended by the member (compaction, auth): its
			// entries can no longer be kept current.
			if w != nil {
				s.rw.forgetLocked(c, w)
			}
		case resp.Created:
			if w != nil {
				w.synced = true
			}
		case len(resp.Events) > 0:
			for _, ev := range resp.Events {
				s.invalidateLocked(string(ev.GetKv().GetKey()))
			}
			if w != nil && !resp.Fragment {
				w.rev = max(w.rev, rev)
			}
		default: // progress: every event of the watch <= rev was delivered
			if w != nil {
				w.rev = max(w.rev, rev)
			}
			s.asking = false
		}
		c.mu.Unlock()
	}
}

// rangeWatchCount is how many range watches the cache holds.
func (c *readCache) rangeWatchCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.idents {
		n += len(s.rw.byRange)
	}
	return n
}
