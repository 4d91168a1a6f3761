package recipe

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// CacheHandler receives a Cache's changes. Any field may be nil. The
// handlers of one cache are called from one goroutine, in revision order
// (and, within a revision or a resync, in key order); a slow handler
// delays the cache's later updates, not its reads. The KeyValues are
// shared with the cache: do not modify them.
type CacheHandler struct {
	// OnAdd: a key appeared (including every key of the initial snapshot).
	OnAdd func(kv *client.KeyValue)
	// OnUpdate: a key's value (or lease) changed.
	OnUpdate func(old, cur *client.KeyValue)
	// OnDelete: a key went away; old is its last cached version.
	OnDelete func(old *client.KeyValue)
}

// CacheOption configures NewCache.
type CacheOption func(*cacheConfig)

type cacheConfig struct {
	handlers []CacheHandler
	progress time.Duration
	// ready, if set, is called once the snapshot is loaded and its
	// handlers called, before any later change (for WatchMembers).
	ready func(*Cache)
}

// WithCacheHandler registers h before the cache reads its snapshot, so h
// sees every key from the start: OnAdd for each key of the snapshot, then
// every change. Several handlers are called in registration order.
func WithCacheHandler(h CacheHandler) CacheOption {
	return func(c *cacheConfig) { c.handlers = append(c.handlers, h) }
}

// WithCacheProgressInterval sets how often an idle cache asks the
// cluster's progress (default 500ms): this is how Revision advances past
// writes to keys outside the prefix, which WaitForRevision may wait for.
func WithCacheProgressInterval(d time.Duration) CacheOption {
	return func(c *cacheConfig) { c.progress = d }
}

// DefaultCacheProgressInterval is the progress interval unless
// WithCacheProgressInterval says otherwise.
const DefaultCacheProgressInterval = 500 * time.Millisecond

// ErrCacheClosed is returned by WaitForRevision once the cache stopped.
var ErrCacheClosed = errors.New("recipe: the cache is closed")

// Cache is a local, read-only copy of every key under a prefix, kept up
// to date by a watch (what Curator's CuratorCache and Kubernetes
// informers are). Reads are served from memory without a round trip.
//
// Consistency: the cache starts from a snapshot of the prefix at one
// revision R and applies every change after R, in order, each once; at
// any moment its contents equal the prefix at Revision(). A transient
// disconnect is bridged by the watch itself (it resumes after the last
// revision delivered). If the watch ends anyway, the cache resumes from
// Revision()+1; if that history has been compacted (ErrCompacted), it
// reads a new snapshot and calls the handlers only for the differences
// between it and the cache: a key changed several times while the cache
// was behind yields one OnUpdate with its latest version, a key created
// and deleted meanwhile yields nothing. No handler call is missed or
// repeated with respect to the states the cache moves through.
//
// Memory: the cache holds the latest version of every key under the
// prefix (key, value and four int64s each, plus a map entry), and no
// history; the watch buffers at most 16 revisions' batches in front of
// it. A resync holds a second copy of the prefix while it diffs.
type Cache struct {
	w      client.Watcher
	prefix string
	cfg    cacheConfig
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.RWMutex
	items map[string]*client.KeyValue
	rev   int64
	// handled is the revision whose handler calls have all returned;
	// WaitForRevision waits for it, not for rev.
	handled int64
	resyncs int
	changed chan struct{} // closed and replaced when handled advances
	err     error
}

// NewCache reads the snapshot of prefix and starts following it. It
// returns once the snapshot is loaded and the handlers have seen it. The
// cache runs until ctx ends or Close.
func NewCache(ctx context.Context, w client.Watcher, prefix string, opts ...CacheOption) (*Cache, error) {
	cfg := cacheConfig{progress: DefaultCacheProgressInterval}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.progress <= 0 {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "cache progress interval must be positive"}
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &Cache{
		w: w, prefix: prefix, cfg: cfg, ctx: cctx, cancel: cancel,
		done: make(chan struct{}), items: map[string]*client.KeyValue{},
		changed: make(chan struct{}),
	}
	wt, err := c.snapshot(false)
	if err != nil {
		cancel()
		return nil, err
	}
	if cfg.ready != nil {
		cfg.ready(c)
	}
	go c.run(wt)
	return c, nil
}

// Get returns the cached version of key (which must be under the
// prefix), or nil and false.
func (c *Cache) Get(key string) (*client.KeyValue, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	kv, ok := c.items[key]
	return kv, ok
}

// List returns the cached keys starting with prefix (which may be longer
// than the cache's), in key order.
func (c *Cache) List(prefix string) []*client.KeyValue {
	c.mu.RLock()
	out := make([]*client.KeyValue, 0, len(c.items))
	for k, kv := range c.items {
		if strings.HasPrefix(k, prefix) {
			out = append(out, kv)
		}
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Len is the number of cached keys.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.items)
}

// Revision is the store revision the cache's contents are at.
func (c *Cache) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// Resyncs counts the snapshots read after the first (each after the
// watch's history was compacted away).
func (c *Cache) Resyncs() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.resyncs
}

// WaitForRevision waits until the cache is at revision rev or later, so
// a writer reads its own write: after a Put returning revision r,
// WaitForRevision(ctx, r) then Get sees the put's value (or a later
// one). A write under the prefix is reached when its event arrives; a
// revision made elsewhere by the next progress notification. The
// handlers for rev (and every earlier revision) have returned when it
// returns, so what they did is visible to its caller. A handler must not
// wait, itself, for the revision it is handling: that wait would never
// end (handlers run one at a time, on the cache's goroutine).
func (c *Cache) WaitForRevision(ctx context.Context, rev int64) error {
	for {
		c.mu.RLock()
		cur, ch, err := c.handled, c.changed, c.err
		c.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-c.done:
			if err == nil {
				c.mu.RLock()
				err = c.err
				c.mu.RUnlock()
			}
			if err == nil {
				err = ErrCacheClosed
			}
			return err
		default:
		}
		select {
		case <-ch:
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the cache and waits for its handlers to return.
func (c *Cache) Close() {
	c.cancel()
	<-c.done
}

// Done is closed when the cache has stopped (Close or its ctx).
func (c *Cache) Done() <-chan struct{} { return c.done }

// snapshot opens a watch with an initial snapshot and brings the cache
// to it, calling the handlers for the differences. A resync is counted
// with the new state, before WaitForRevision can see it.
func (c *Cache) snapshot(resync bool) (*client.Watch, error) {
	wt, err := c.w.WatchPrefix(c.ctx, c.prefix, client.WithInitialSnapshot(), client.WithProgressNotify(c.cfg.progress))
	if err != nil {
		return nil, err
	}
	init := wt.Initial()
	if init.Revision < c.Revision() {
		// A member behind the cache answered: using it would move the
		// cache back in time. Try again (another member, or later).
		wt.Stop()
		return nil, &client.Error{Kind: client.ErrUnavailable, Msg: "cache: snapshot older than the cache"}
	}
	next := make(map[string]*client.KeyValue, len(init.KVs))
	for _, kv := range init.KVs {
		next[kv.Key] = kv
	}
	c.mu.RLock()
	keys := make([]string, 0, len(next)+len(c.items))
	for k := range next {
		keys = append(keys, k)
	}
	for k := range c.items {
		if _, ok := next[k]; !ok {
			keys = append(keys, k)
		}
	}
	old := c.items
	c.mu.RUnlock()
	sort.Strings(keys)
	var calls []func()
	for _, k := range keys {
		o, n := old[k], next[k]
		switch {
		case o == nil:
			calls = append(calls, c.addCall(n))
		case n == nil:
			calls = append(calls, c.deleteCall(o))
		case !sameKV(o, n):
			calls = append(calls, c.updateCall(o, n))
		}
	}
	c.mu.Lock()
	c.items = next
	c.advance(init.Revision)
	if resync {
		c.resyncs++
	}
	c.mu.Unlock()
	for _, f := range calls {
		f()
	}
	c.settle(init.Revision)
	return wt, nil
}

func sameKV(a, b *client.KeyValue) bool {
	return a.ModRevision == b.ModRevision && a.CreateRevision == b.CreateRevision &&
		a.Version == b.Version && a.Lease == b.Lease && bytes.Equal(a.Value, b.Value)
}

// advance sets the revision Get and List reflect; c.mu is held.
func (c *Cache) advance(rev int64) {
	if rev > c.rev {
		c.rev = rev
	}
}

// settle records that the handler calls for rev have returned and wakes
// WaitForRevision.
func (c *Cache) settle(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev <= c.handled {
		return
	}
	c.handled = rev
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Cache) addCall(kv *client.KeyValue) func() {
	return func() {
		for _, h := range c.cfg.handlers {
			if h.OnAdd != nil {
				h.OnAdd(kv)
			}
		}
	}
}

func (c *Cache) updateCall(old, cur *client.KeyValue) func() {
	return func() {
		for _, h := range c.cfg.handlers {
			if h.OnUpdate != nil {
				h.OnUpdate(old, cur)
			}
		}
	}
}

func (c *Cache) deleteCall(old *client.KeyValue) func() {
	return func() {
		for _, h := range c.cfg.handlers {
			if h.OnDelete != nil {
				h.OnDelete(old)
			}
		}
	}
}

// apply brings one batch into the cache, then calls its handlers.
func (c *Cache) apply(b client.WatchBatch) {
	var calls []func()
	c.mu.Lock()
	if b.Revision <= c.rev {
		// Already in the cache (a resumed or re-read watch); never twice.
		c.mu.Unlock()
		return
	}
	for _, ev := range b.Events {
		old := c.items[ev.KV.Key]
		if ev.Type == client.EventDelete {
			if old != nil {
				delete(c.items, ev.KV.Key)
				calls = append(calls, c.deleteCall(old))
			}
			continue
		}
		c.items[ev.KV.Key] = ev.KV
		if old == nil {
			calls = append(calls, c.addCall(ev.KV))
		} else {
			calls = append(calls, c.updateCall(old, ev.KV))
		}
	}
	c.advance(b.Revision)
	c.mu.Unlock()
	for _, f := range calls {
		f()
	}
	c.settle(b.Revision)
}

// run follows the watch and replaces it when it ends: resuming after the
// cache's revision, or, when that history is gone, from a new snapshot.
func (c *Cache) run(wt *client.Watch) {
	defer close(c.done)
	defer c.cancel()
	backoff := 50 * time.Millisecond
	for {
		for b := range wt.Events() {
			c.apply(b)
			backoff = 50 * time.Millisecond
		}
		err := wt.Err()
		wt.Stop()
		if c.ctx.Err() != nil {
			return
		}
		for {
			wt, err = c.reopen(err)
			if err == nil {
				break
			}
			if c.ctx.Err() != nil {
				return
			}
			select {
			case <-time.After(backoff):
			case <-c.ctx.Done():
				return
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// reopen replaces a watch that ended with err.
func (c *Cache) reopen(err error) (*client.Watch, error) {
	if !errors.Is(err, client.ErrCompacted) {
		wt, err := c.w.WatchPrefix(c.ctx, c.prefix, client.WithStartRevision(c.Revision()+1), client.WithProgressNotify(c.cfg.progress))
		if err == nil || !errors.Is(err, client.ErrCompacted) {
			return wt, err
		}
	}
	return c.snapshot(true)
}
