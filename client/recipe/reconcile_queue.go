package recipe

import (
	"context"
	"sync"
	"time"
)

// workQueue is the reconciler's queue, with client-go's workqueue
// semantics: a key queued several times before a worker takes it is
// reconciled once (dirty set); a key being reconciled is not handed to
// another worker, and if it is queued meanwhile it is handed out again
// once the first reconcile is done (processing set).
type workQueue struct {
	base, max time.Duration

	mu         sync.Mutex
	cond       *sync.Cond
	queue      []string
	dirty      map[string]bool
	processing map[string]bool
	failures   map[string]int
	timers     map[*time.Timer]bool
	closed     bool
	idle       chan struct{} // closed and replaced when the queue goes idle
}

func newWorkQueue(base, max time.Duration) *workQueue {
	q := &workQueue{
		base: base, max: max, dirty: map[string]bool{}, processing: map[string]bool{},
		failures: map[string]int{}, timers: map[*time.Timer]bool{}, idle: make(chan struct{}),
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *workQueue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.dirty[key] {
		return
	}
	q.dirty[key] = true
	if !q.processing[key] {
		q.queue = append(q.queue, key)
		q.cond.Signal()
	}
}

func (q *workQueue) addAfter(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		q.mu.Lock()
		delete(q.timers, t)
		q.mu.Unlock()
		q.add(key)
	})
	q.timers[t] = true
}

// get blocks for the next key; false once shut down.
func (q *workQueue) get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.queue) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return "", false
	}
	key := q.queue[0]
	q.queue = q.queue[1:]
	delete(q.dirty, key)
	q.processing[key] = true
	return key, true
}

func (q *workQueue) done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] && !q.closed {
		q.queue = append(q.queue, key)
		q.cond.Signal()
	}
	if len(q.queue) == 0 && len(q.processing) == 0 {
		close(q.idle)
		q.idle = make(chan struct{})
	}
}

// fail records an error for key and returns its backoff.
func (q *workQueue) fail(key string) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.failures[key]
	q.failures[key] = n + 1
	d := q.base
	for range n {
		if d >= q.max/2 {
			return q.max
		}
		d *= 2
	}
	return min(d, q.max)
}

func (q *workQueue) forget(key string) {
	q.mu.Lock()
	delete(q.failures, key)
	q.mu.Unlock()
}

// waitIdle returns once nothing is queued or being processed.
func (q *workQueue) waitIdle(ctx context.Context) error {
	q.mu.Lock()
	if len(q.queue) == 0 && len(q.processing) == 0 {
		q.mu.Unlock()
		return nil
	}
	ch := q.idle
	q.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *workQueue) shutdown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.closed = true
	for t := range q.timers {
		t.Stop()
	}
	q.cond.Broadcast()
	close(q.idle)
	q.idle = make(chan struct{})
}
