package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func invoiceKey(prefix string, i int) string { return fmt.Sprintf("%sinvoice/%03d", prefix, i) }

// worker processes open invoices, one at a time. The same code runs as a
// goroutine of the narrated run and as a process of its own
// (--instance).
type worker struct {
	name    string
	c       *client.Client
	prefix  string
	lockTTL time.Duration // how long it holds an invoice's lock without renewing it
	work    time.Duration // how long processing one invoice takes
	offset  int           // where in the list of open invoices it starts
	// forever keeps the worker looking for open invoices once none is
	// left (an instance, until SIGTERM); else it returns then.
	forever bool
	emit    func(what string, kv ...any)
	// pause, set in the narrated run only, plays the fault there: it
	// pauses this worker on invoice i, if that is the one, until another
	// worker has processed it.
	pause func(ctx context.Context, i int)
}

// offsetOf spreads instances over the list by their names.
func offsetOf(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % 1024)
}

// seed writes invoices 1 to n as open, those that do not exist yet: every
// instance seeds, and the first one's invoices are the ones processed.
// An invoice another instance already locked exists too: the store
// refuses the write with Locked before it looks at IfAbsent.
func seed(ctx context.Context, c *client.Client, prefix string, n int) (created int, err error) {
	for i := 1; i <= n; i++ {
		_, err := c.Put(ctx, invoiceKey(prefix, i), []byte("open"), client.IfAbsent())
		switch {
		case err == nil:
			created++
		case !errors.Is(err, client.ErrConflict) && !errors.Is(err, client.ErrLocked):
			return created, err
		}
	}
	return created, nil
}

// run takes open invoices one at a time until none is left (or, with
// forever, until ctx ends).
func (w *worker) run(ctx context.Context) error {
	idle := false
	for ctx.Err() == nil {
		r, err := w.c.List(ctx, w.prefix+"invoice/")
		if err != nil {
			w.retryLater(ctx, "listing", err)
			continue
		}
		var open []int
		for _, kv := range r.KVs {
			if string(kv.Value) == "open" {
				var i int
				fmt.Sscanf(strings.TrimPrefix(kv.Key, w.prefix+"invoice/"), "%d", &i)
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			if !w.forever {
				return nil
			}
			if !idle {
				w.emit("idle", "why", "no open invoice")
				idle = true
			}
		} else {
			idle = false
		}
		took := false
		for j := range open {
			i := open[(j+w.offset)%len(open)] // workers start at different invoices
			ok, err := w.process(ctx, i)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				w.retryLater(ctx, fmt.Sprintf("invoice %d", i), err)
				break
			}
			took = took || ok
		}
		if !took { // none open, or the open ones are locked by others: look again shortly
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

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

// process takes invoice i if its lock is free and it is still open, and
// pays it. took reports that it held the lock.
func (w *worker) process(ctx context.Context, i int) (took bool, err error) {
	key := invoiceKey(w.prefix, i)
	res, err := w.c.TryAcquire(ctx, key, w.lockTTL)
	if err != nil || !res.Acquired {
		return false, err
	}
	h := res.Handle
	defer func() {
		// The lock is given back whatever happened: after the result, on
		// an error, or when the instance is told to stop (SIGTERM) in the
		// middle of the work. ErrLocked if it expired meanwhile: nothing
		// to give back.
		cctx, cancel := exenv.CleanupContext()
		rerr := w.c.Release(cctx, h)
		cancel()
		if ctx.Err() != nil && rerr == nil {
			w.emit("released", "invoice", i, "token", h.Token)
		}
	}()
	// The re-read under the lock: another worker may have paid it since
	// our list, and released its lock before we took it.
	kv, err := w.c.Get(ctx, key, client.WithLock(h))
	if err != nil {
		return false, err
	}
	if string(kv.Value) != "open" {
		w.emit("skipped", "invoice", i, "why", string(kv.Value))
		return false, nil
	}
	w.emit("locked", "invoice", i, "token", h.Token)
	select { // the work itself: charging the card, rendering the PDF
	case <-ctx.Done():
		return true, ctx.Err()
	case <-time.After(w.work):
	}
	if w.pause != nil {
		w.pause(ctx, i)
	}
	_, err = w.c.Put(ctx, key, []byte("paid by "+w.name), client.WithLock(h))
	switch {
	case err == nil:
		w.emit("paid", "invoice", i, "token", h.Token)
		return true, nil
	case errors.Is(err, client.ErrLocked):
		w.emit("refused", "invoice", i, "token", h.Token, "err", err)
		return true, nil
	}
	return true, err
}
