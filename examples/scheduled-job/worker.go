package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// maxCatchUp is how many missed periods a new leader runs late: a
// longer gap (every instance down for a while) is skipped, and says so.
const maxCatchUp = 100

// worker is one instance of the service: it campaigns for leadership
// and, while it leads, runs each period's job once. The same code runs
// as a goroutine of the narrated run and as a process of its own
// (--instance). Periods are numbered since the Unix epoch, so that
// every instance agrees on them without asking anyone.
type worker struct {
	name   string
	c      *client.Client
	prefix string        // every key the service writes is under it
	period time.Duration // the job runs once per period
	ttl    time.Duration // the session's TTL: how long a frozen leader keeps the leadership
	// from and until bound the periods run (0: from the current one
	// when no run is recorded; no end).
	from, until int64
	// emit reports an event: what happened, and its fields.
	emit func(what string, kv ...any)
	// stall, set in the narrated run only, plays the fault there: it
	// reports whether this worker freezes before writing period p, and
	// if so plays the freeze, returning once the frozen worker has woken
	// and tried its late write.
	stall func(ctx context.Context, p int64, s *concurrency.Session, l *concurrency.Leadership) bool
}

func (w *worker) runKey(p int64) string { return fmt.Sprintf("%sruns/%012d", w.prefix, p) }

// current is the number of the period now.
func (w *worker) current() int64 { return time.Now().UnixNano() / int64(w.period) }

// run campaigns, leads while elected, and campaigns again after losing
// the leadership, until ctx ends. It then gives back what it holds: the
// leadership (Resign) and its session's lease (Close revokes it).
func (w *worker) run(ctx context.Context) error {
	for ctx.Err() == nil {
		s, err := concurrency.NewSession(ctx, w.c, concurrency.WithTTL(w.ttl))
		if err != nil {
			w.retryLater(ctx, "session", err)
			continue
		}
		w.emit("campaigning", "lease", strconv.FormatInt(s.Lease(), 16))
		l, err := concurrency.NewElection(s, w.prefix+"leader").Campaign(ctx, []byte(w.name))
		if err != nil {
			closeSession(s)
			w.retryLater(ctx, "campaign", err)
			continue
		}
		w.emit("leader", "term", l.Term())
		froze, err := w.lead(ctx, s, l)
		if froze {
			continue // its session is gone; it campaigns again with a new one
		}
		cctx, cancel := exenv.CleanupContext()
		rerr := l.Resign(cctx)
		cancel()
		if ctx.Err() != nil && rerr == nil {
			w.emit("resigned", "term", l.Term())
		}
		closeSession(s)
		if err != nil {
			w.retryLater(ctx, "leading", err)
		}
	}
	return nil
}

// closeSession revokes s's lease; should the cluster be unreachable, it
// expires after the TTL.
func closeSession(s *concurrency.Session) { _ = s.Close() }

// retryLater reports an error that the next attempt may not have (the
// cluster is electing a leader, say) and pauses before it.
func (w *worker) retryLater(ctx context.Context, doing string, err error) {
	if ctx.Err() != nil {
		return
	}
	w.emit("retrying", "doing", doing, "err", err)
	select {
	case <-ctx.Done():
	case <-time.After(500 * time.Millisecond):
	}
}

// lead runs every due period's job until the leadership is lost or ctx
// ends. froze reports that this worker froze (its session is gone).
func (w *worker) lead(ctx context.Context, s *concurrency.Session, l *concurrency.Leadership) (froze bool, err error) {
	next, err := w.resume(ctx, l)
	if errors.Is(err, client.ErrLocked) {
		w.emit("deposed", "term", l.Term(), "err", err)
		return false, nil
	}
	if err != nil {
		return false, ctxOr(ctx, err)
	}
	for {
		for now := w.current(); next <= now && (w.until == 0 || next <= w.until); next++ {
			if w.stall != nil && w.stall(ctx, next, s, l) {
				return true, nil
			}
			ok, err := w.record(ctx, next, l)
			if err != nil || !ok {
				return false, ctxOr(ctx, err)
			}
		}
		if w.until != 0 && next > w.until {
			<-ctx.Done()
			return false, nil
		}
		// Sleep until the next period begins. A process frozen here
		// (SIGSTOP) wakes late and writes the period it was waiting for
		// with its old term: the fence refuses it.
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(time.Until(time.Unix(0, next*int64(w.period)))):
		}
	}
}

// resume is the first period this leader runs: the one after the last
// recorded run, read fenced by l (a leader already deposed learns it
// here), or the current one if none is recorded.
func (w *worker) resume(ctx context.Context, l *concurrency.Leadership) (int64, error) {
	r, err := w.c.List(ctx, w.prefix+"runs/", client.WithKeysOnly(), client.WithLock(l.Handle()))
	if err != nil {
		return 0, err
	}
	var last int64
	for _, kv := range r.KVs {
		n, _ := strconv.ParseInt(strings.TrimPrefix(kv.Key, w.prefix+"runs/"), 10, 64)
		last = max(last, n)
	}
	now := w.current()
	switch {
	case last == 0:
		return max(now, w.from), nil
	case now-last > maxCatchUp:
		w.emit("skipped", "from", last+1, "to", now-1, "why", "more periods missed than a new leader runs late")
		return now, nil
	}
	return last + 1, nil
}

// record runs period p's job: it writes the run's record fenced by the
// leadership's term. ok is false if the store refused it (this worker
// is no longer the leader). A write whose outcome is unknown (the
// cluster changed leader) is settled by a fenced read: while this term
// is current only this worker can have written the record.
func (w *worker) record(ctx context.Context, p int64, l *concurrency.Leadership) (ok bool, err error) {
	for {
		_, err := w.c.Put(ctx, w.runKey(p), []byte(w.name), client.WithLock(l.Handle()))
		if err == nil {
			w.emit("ran", "period", p, "term", l.Term())
			return true, nil
		}
		if errors.Is(err, client.ErrLocked) {
			w.emit("refused", "period", p, "term", l.Term(), "err", err)
			return false, nil
		}
		for {
			w.retryLater(ctx, fmt.Sprintf("period %d", p), err)
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			_, err = w.c.Get(ctx, w.runKey(p), client.WithLock(l.Handle()))
			switch {
			case err == nil:
				w.emit("ran", "period", p, "term", l.Term())
				return true, nil
			case errors.Is(err, client.ErrLocked):
				w.emit("deposed", "term", l.Term(), "err", err)
				return false, nil
			}
			if errors.Is(err, client.ErrNotFound) {
				break // not applied: write it again
			}
		}
	}
}

func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
