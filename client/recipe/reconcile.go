package recipe

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
)

// ReconcileResult is what a ReconcileFunc asks of the work queue.
type ReconcileResult struct {
	// RequeueAfter, if positive, reconciles the key again after this long
	// (the key's error backoff is reset: the call succeeded).
	RequeueAfter time.Duration
}

// ReconcileFunc makes the actual state of key (the part after the
// prefixes) equal to its desired state. It is level-triggered: it is told
// only which key to look at, and reads both states itself (Desired,
// Actual). It must be idempotent: it may be called again for a key that is
// already in order. Writes it makes through Reconciler.Put and Delete with
// the ctx it was given are fenced by the leadership.
type ReconcileFunc func(ctx context.Context, key string) (ReconcileResult, error)

// ReconcilerClient is what a Reconciler uses of a DKV client.
type ReconcilerClient interface {
	client.KV
	client.Watcher
}

// ReconcilerConfig configures NewReconciler.
type ReconcilerConfig struct {
	// Election is the election's name: of the Reconcilers campaigning
	// under one name, only the leader reconciles. Required.
	Election string
	// DesiredPrefix holds desired state, one key per object. Required.
	DesiredPrefix string
	// ActualPrefix, if set, holds reported actual state; its changes
	// trigger reconciles too. Actual state kept elsewhere is reported
	// with Enqueue.
	ActualPrefix string
	// Reconcile is called for every key whose desired or actual state
	// changed, on resync, and on requeue. Required.
	Reconcile ReconcileFunc
	// Workers is how many keys are reconciled at once (default 4); one
	// key is never reconciled by two workers at once.
	Workers int
	// Resync is how often every known key is reconciled even without a
	// change (default 5m).
	Resync time.Duration
	// BaseBackoff and MaxBackoff bound the per-key exponential backoff
	// after an error: BaseBackoff·2^(n-1) after the n-th error in a row,
	// at most MaxBackoff (defaults 50ms and 1m).
	BaseBackoff, MaxBackoff time.Duration
	// OnRequeue, if set, is told every requeue after an error or a
	// RequeueAfter (for logs and metrics).
	OnRequeue func(key string, after time.Duration, err error)
}

// Reconciler runs a level-triggered control loop (as controller-runtime's
// does) on the elected leader among its instances. See docs/recipes.md,
// "Reconciler".
type Reconciler struct {
	c   ReconcilerClient
	s   *concurrency.Session
	cfg ReconcilerConfig
	q   *workQueue

	mu      sync.Mutex
	desired *Cache
	actual  *Cache
	leading chan struct{} // closed while leading
}

type fenceKey struct{}

// writeRevKey carries, per Reconcile call, the highest revision its
// writes through Put and Delete produced.
type writeRevKey struct{}

func noteWrite(ctx context.Context, rev int64) {
	if p, ok := ctx.Value(writeRevKey{}).(*atomic.Int64); ok {
		for {
			cur := p.Load()
			if rev <= cur || p.CompareAndSwap(cur, rev) {
				return
			}
		}
	}
}

// NewReconciler returns a reconciler campaigning on session s; Run starts it.
func NewReconciler(c ReconcilerClient, s *concurrency.Session, cfg ReconcilerConfig) (*Reconciler, error) {
	switch {
	case cfg.Election == "" || cfg.DesiredPrefix == "" || cfg.Reconcile == nil:
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "reconciler needs Election, DesiredPrefix and Reconcile"}
	case cfg.Workers < 0 || cfg.Resync < 0 || cfg.BaseBackoff < 0 || cfg.MaxBackoff < 0:
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "reconciler Workers, Resync and backoffs must not be negative"}
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Resync == 0 {
		cfg.Resync = 5 * time.Minute
	}
	if cfg.BaseBackoff == 0 {
		cfg.BaseBackoff = 50 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = time.Minute
	}
	return &Reconciler{c: c, s: s, cfg: cfg, leading: make(chan struct{})}, nil
}

// Desired returns key's desired state as the leader's cache has it.
func (r *Reconciler) Desired(key string) (*client.KeyValue, bool) {
	return r.get(func() *Cache { return r.desired }, r.cfg.DesiredPrefix, key)
}

// Actual returns key's actual state under ActualPrefix as the leader's
// cache has it.
func (r *Reconciler) Actual(key string) (*client.KeyValue, bool) {
	if r.cfg.ActualPrefix == "" {
		return nil, false
	}
	return r.get(func() *Cache { return r.actual }, r.cfg.ActualPrefix, key)
}

func (r *Reconciler) get(which func() *Cache, prefix, key string) (*client.KeyValue, bool) {
	r.mu.Lock()
	c := which()
	r.mu.Unlock()
	if c == nil {
		return nil, false
	}
	return c.Get(prefix + key)
}

// Fence returns the leadership handle carried by a ctx that Reconcile
// was given, to pass to client.WithLock on writes made directly.
func Fence(ctx context.Context) (client.LockHandle, bool) {
	h, ok := ctx.Value(fenceKey{}).(client.LockHandle)
	return h, ok
}

// ErrNotFenced is returned by Reconciler.Put and Delete called with a
// context that Reconcile was not given.
var ErrNotFenced = errors.New("recipe: write outside a reconcile: no leadership to fence it with")

// Put writes key (a full key, e.g. under ActualPrefix) fenced by the
// leadership in ctx: refused with client.ErrLocked once it was lost.
func (r *Reconciler) Put(ctx context.Context, key string, value []byte, opts ...client.OpOption) (*client.PutResult, error) {
	h, ok := Fence(ctx)
	if !ok {
		return nil, ErrNotFenced
	}
	res, err := r.c.Put(ctx, key, value, append(opts, client.WithLock(h))...)
	if err == nil {
		noteWrite(ctx, res.Revision)
	}
	return res, err
}

// Delete deletes key fenced by the leadership in ctx, as Put.
func (r *Reconciler) Delete(ctx context.Context, key string, opts ...client.OpOption) (*client.DeleteResult, error) {
	h, ok := Fence(ctx)
	if !ok {
		return nil, ErrNotFenced
	}
	res, err := r.c.Delete(ctx, key, append(opts, client.WithLock(h))...)
	if err == nil {
		noteWrite(ctx, res.Revision)
	}
	return res, err
}

// Wrote tells the Reconciler that the reconcile ctx belongs to wrote
// revision rev by other means than Put and Delete (a transaction fenced
// with Fence), so that, as after Put and Delete, the key is not
// reconciled again before the caches show that write. Ignored with a ctx
// that Reconcile was not given.
func (r *Reconciler) Wrote(ctx context.Context, rev int64) { noteWrite(ctx, rev) }

// Enqueue asks for key to be reconciled (for actual state reported other
// than under ActualPrefix). Ignored while not leading.
func (r *Reconciler) Enqueue(key string) {
	r.mu.Lock()
	q := r.q
	r.mu.Unlock()
	if q != nil {
		q.add(key)
	}
}

// Run campaigns, reconciles while leading, and campaigns again after
// losing the leadership, until ctx ends.
func (r *Reconciler) Run(ctx context.Context) error {
	e := concurrency.NewElection(r.s, r.cfg.Election)
	backoff := 50 * time.Millisecond
	for {
		l, err := e.Campaign(ctx, nil)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select {
			case <-r.s.Done():
				return r.s.Err()
			default:
			}
			if !campaignRetryable(err) {
				return err
			}
			// A campaign's wait lost with its member (the raft leader
			// died while we queued): campaign again, or this instance
			// would stand by silently for ever.
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			case <-r.s.Done():
				return r.s.Err()
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		r.lead(ctx, l)
		// Give the leadership up whatever ended the loop (ctx, a cache
		// that failed to start): campaigning again while still holding
		// the lock would wait for ourselves. Already lost: ErrLocked,
		// ignored.
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.Resign(dctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-r.s.Done():
			return r.s.Err()
		default:
		}
	}
}

// campaignRetryable: a campaign that failed for a reason other than bad
// input or missing rights may succeed when tried again.
func campaignRetryable(err error) bool {
	for _, fatal := range []error{client.ErrInvalidInput, client.ErrPermissionDenied, client.ErrUnauthenticated} {
		if errors.Is(err, fatal) {
			return false
		}
	}
	return true
}

// lead runs the loop until leadership is lost or ctx ends.
func (r *Reconciler) lead(ctx context.Context, l *concurrency.Leadership) {
	lctx, cancel := context.WithCancel(context.WithValue(ctx, fenceKey{}, l.Handle()))
	defer cancel()
	go func() {
		select {
		case <-l.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	q := newWorkQueue(r.cfg.BaseBackoff, r.cfg.MaxBackoff)
	defer q.shutdown()
	enq := func(prefix string) CacheHandler {
		k := func(kv *client.KeyValue) { q.add(strings.TrimPrefix(kv.Key, prefix)) }
		return CacheHandler{OnAdd: k, OnUpdate: func(_, cur *client.KeyValue) { k(cur) }, OnDelete: k}
	}
	desired, err := NewCache(lctx, r.c, r.cfg.DesiredPrefix, WithCacheHandler(enq(r.cfg.DesiredPrefix)))
	if err != nil {
		return
	}
	defer desired.Close()
	var actual *Cache
	if r.cfg.ActualPrefix != "" {
		if actual, err = NewCache(lctx, r.c, r.cfg.ActualPrefix, WithCacheHandler(enq(r.cfg.ActualPrefix))); err != nil {
			return
		}
		defer actual.Close()
	}
	r.mu.Lock()
	r.desired, r.actual, r.q = desired, actual, q
	close(r.leading)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.desired, r.actual, r.q, r.leading = nil, nil, nil, make(chan struct{})
		r.mu.Unlock()
	}()

	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(lctx, q, desired, actual)
		}()
	}
	t := time.NewTicker(r.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-lctx.Done():
			q.shutdown()
			wg.Wait()
			return
		case <-t.C:
			for _, k := range r.keys() {
				q.add(k)
			}
		}
	}
}

func (r *Reconciler) work(ctx context.Context, q *workQueue, desired, actual *Cache) {
	for {
		key, ok := q.get()
		if !ok {
			return
		}
		var wrote atomic.Int64
		res, err := r.cfg.Reconcile(context.WithValue(ctx, writeRevKey{}, &wrote), key)
		// Read-your-writes: the key is not reconciled again before the
		// caches show what this call wrote, so a stale cache does not make
		// it repeat an action.
		if rev := wrote.Load(); rev > 0 && ctx.Err() == nil {
			_ = desired.WaitForRevision(ctx, rev)
			if actual != nil {
				_ = actual.WaitForRevision(ctx, rev)
			}
		}
		if ctx.Err() != nil {
			q.done(key)
			return
		}
		var after time.Duration
		switch {
		case err != nil:
			after = q.fail(key)
		case res.RequeueAfter > 0:
			q.forget(key)
			after = res.RequeueAfter
		default:
			q.forget(key)
		}
		q.done(key)
		if after > 0 {
			if r.cfg.OnRequeue != nil {
				r.cfg.OnRequeue(key, after, err)
			}
			q.addAfter(key, after)
		}
	}
}

// keys is every key under either prefix (relative), sorted.
func (r *Reconciler) keys() []string {
	r.mu.Lock()
	d, a := r.desired, r.actual
	r.mu.Unlock()
	set := map[string]bool{}
	if d != nil {
		for _, kv := range d.List(r.cfg.DesiredPrefix) {
			set[strings.TrimPrefix(kv.Key, r.cfg.DesiredPrefix)] = true
		}
	}
	if a != nil {
		for _, kv := range a.List(r.cfg.ActualPrefix) {
			set[strings.TrimPrefix(kv.Key, r.cfg.ActualPrefix)] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Sync waits until this instance leads, then reconciles every known key
// and returns once the queue is idle with both caches caught up to the
// store's revision (a pass made by Sync's own reconciles' writes included).
// Requeues scheduled for later are not waited for. For tests and tools.
func (r *Reconciler) Sync(ctx context.Context) error {
	for {
		r.mu.Lock()
		leading, q, d, a := r.leading, r.q, r.desired, r.actual
		r.mu.Unlock()
		select {
		case <-leading:
		case <-ctx.Done():
			return ctx.Err()
		}
		if d == nil {
			continue // lost it meanwhile
		}
		rr, err := r.c.List(ctx, r.cfg.DesiredPrefix, client.WithCountOnly())
		if err != nil {
			return err
		}
		rev := rr.Revision
		if err := d.WaitForRevision(ctx, rev); err != nil {
			return err
		}
		if a != nil {
			if err := a.WaitForRevision(ctx, rev); err != nil {
				return err
			}
		}
		for _, k := range r.keys() {
			q.add(k)
		}
		if err := q.waitIdle(ctx); err != nil {
			return err
		}
		rr, err = r.c.List(ctx, r.cfg.DesiredPrefix, client.WithCountOnly())
		if err != nil {
			return err
		}
		if rr.Revision == rev {
			return nil
		}
	}
}
