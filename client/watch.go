package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/protobuf/proto"
)

// EventType says what happened to a key.
type EventType int

const (
	// EventPut: the key was created or updated.
	EventPut EventType = iota
	// EventDelete: the key was deleted.
	EventDelete
)

func (t EventType) String() string {
	if t == EventDelete {
		return "DELETE"
	}
	return "PUT"
}

// WatchEvent is one change to a key.
type WatchEvent struct {
	Type EventType
	// KV is the key after the change; for a delete only Key and
	// ModRevision (the delete's revision) are set.
	KV *KeyValue
	// PrevKV is the previous version, with WithPrevKV, if the key existed.
	PrevKV *KeyValue
	// Revision is the revision of the change (KV.ModRevision).
	Revision int64
	// Marker, for a watch by query (WatchQuery), says how the key
	// relates to the query's result: QueryEnter, QueryChange or
	// QueryLeave.
	Marker QueryMarker
}

// WatchBatch is what a Watch delivers: all the events of one revision (a
// txn's changes arrive together), or, with no events, a progress
// notification (WithProgressNotify): every event up to Revision has been
// delivered.
type WatchBatch struct {
	Revision int64
	Events   []WatchEvent
}

// WatchOption configures a watch. Besides the options below, the OpOptions
// WithPrefix, WithRange, WithFromKey, WithPrevKV and WithRev (the same as
// WithStartRevision) apply; other OpOptions are rejected with
// ErrInvalidInput.
type WatchOption interface {
	applyWatch(*watchConfig) error
}

type watchConfig struct {
	prefix           bool
	rangeEnd         string
	hasRange         bool
	start            int64
	snapshot         bool
	prevKV           bool
	filterPuts       bool
	filterDeletes    bool
	progress         bool
	progressInterval time.Duration
	fragment         int32
	query            string
}

type watchOpt func(*watchConfig)

func (o watchOpt) applyWatch(c *watchConfig) error { o(c); return nil }

func (o OpOption) applyWatch(c *watchConfig) error {
	var oc opConfig
	if o != nil {
		o(&oc)
	}
	c.prefix = c.prefix || oc.prefix
	if oc.hasRange {
		c.rangeEnd, c.hasRange = oc.rangeEnd, true
	}
	c.prevKV = c.prevKV || oc.prevKV
	if oc.rev != 0 {
		c.start = oc.rev
	}
	oc.prefix, oc.rangeEnd, oc.hasRange, oc.prevKV, oc.rev = false, "", false, false, 0
	if !reflect.ValueOf(oc).IsZero() {
		return newError(ErrInvalidInput, "watch takes only WithPrefix, WithRange, WithFromKey, WithPrevKV and WithRev among the operation options")
	}
	return nil
}

// WithStartRevision starts the watch at revision rev: it first replays
// every event from rev on (rev must be above the compact revision, or the
// watch fails with ErrCompacted), then continues live. Without it, and
// without WithInitialSnapshot, the watch starts after the current
// revision.
func WithStartRevision(rev int64) WatchOption {
	return watchOpt(func(c *watchConfig) { c.start = rev })
}

// WithInitialSnapshot makes the watch first read the state of its keys at
// one revision R (Watch.Initial), then deliver every event after R: no
// change is missed or seen twice, even if writes race the call.
func WithInitialSnapshot() WatchOption {
	return watchOpt(func(c *watchConfig) { c.snapshot = true })
}

// WithFilterPuts leaves put events out.
func WithFilterPuts() WatchOption { return watchOpt(func(c *watchConfig) { c.filterPuts = true }) }

// WithFilterDeletes leaves delete events out.
func WithFilterDeletes() WatchOption {
	return watchOpt(func(c *watchConfig) { c.filterDeletes = true })
}

// WithProgressNotify delivers an empty WatchBatch when the watch has been
// idle for interval (0: the server default, 10s), saying it is up to date
// at that revision.
func WithProgressNotify(interval time.Duration) WatchOption {
	return watchOpt(func(c *watchConfig) { c.progress, c.progressInterval = true, interval })
}

// WithFragment caps the events per server message (a large txn arrives in
// several messages that the client reassembles; the application still
// gets one WatchBatch per revision).
func WithFragment(maxEvents int) WatchOption {
	return watchOpt(func(c *watchConfig) { c.fragment = int32(maxEvents) })
}

// Watch is a running watch. Read Events until it is closed, then Err says
// why. Call Stop when done.
type Watch struct {
	c      *Client
	req    *dkvpb.WatchCreateRequest
	cfg    watchConfig
	events chan WatchBatch
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	initial *RangeResult
	start   int64

	mu  sync.Mutex
	err error
	rev int64 // every event <= rev has been delivered
}

// WatchPrefix watches every key starting with prefix.
func (c *Client) WatchPrefix(ctx context.Context, prefix string, opts ...WatchOption) (*Watch, error) {
	return c.WatchKey(ctx, prefix, append(opts, WithPrefix())...)
}

// WatchKey watches key (or, with WithPrefix / WithRange, a range). It
// returns once the watch is established (and, with WithInitialSnapshot,
// the snapshot read). Events arrive in revision order, each exactly once:
// after a disconnect or a node failure the watch reconnects, to another
// endpoint if needed, and resumes after the last revision it delivered.
// If that revision has been compacted meanwhile, Events is closed and Err
// matches ErrCompacted. ctx bounds the watch's whole life.
func (c *Client) WatchKey(ctx context.Context, key string, opts ...WatchOption) (*Watch, error) {
	var cfg watchConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyWatch(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.prefix && cfg.hasRange {
		return nil, newError(ErrInvalidInput, "WithPrefix and WithRange are exclusive")
	}
	if cfg.start < 0 || cfg.fragment < 0 || cfg.progressInterval < 0 {
		return nil, newError(ErrInvalidInput, "start revision, fragment and progress interval must not be negative")
	}
	if cfg.snapshot && cfg.start != 0 {
		return nil, newError(ErrInvalidInput, "WithInitialSnapshot and WithStartRevision are exclusive")
	}
	req := &dkvpb.WatchCreateRequest{
		Key: []byte(key), Prefix: cfg.prefix, StartRevision: cfg.start,
		IncludeInitialSnapshot: cfg.snapshot, PrevKv: cfg.prevKV,
		FilterPuts: cfg.filterPuts, FilterDeletes: cfg.filterDeletes,
		ProgressNotify: cfg.progress, ProgressIntervalMs: cfg.progressInterval.Milliseconds(),
		Fragment: cfg.fragment, Query: cfg.query,
	}
	if cfg.query != "" {
		if key != "" || cfg.prefix || cfg.hasRange {
			return nil, newError(ErrInvalidInput, "a watch by query takes its keys from the query's prefix=; use WatchQuery")
		}
		req.Key, req.PrevKv = nil, true
	}
	if cfg.hasRange {
		req.RangeEnd = []byte(cfg.rangeEnd)
	}
	if cfg.progress && cfg.progressInterval > 0 && req.ProgressIntervalMs == 0 {
		req.ProgressIntervalMs = 1
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Watch{c: c, req: req, cfg: cfg, events: make(chan WatchBatch, 16), ctx: wctx, cancel: cancel, done: make(chan struct{})}
	st, err := w.open(true)
	if err != nil {
		cancel()
		return nil, err
	}
	go w.run(st)
	return w, nil
}

// OnChange calls fn for every change under prefix, in order, until ctx
// ends (it then returns ctx's error) or the watch fails (ErrCompacted, ...).
// The options are those of WatchKey.
func (c *Client) OnChange(ctx context.Context, prefix string, fn func(WatchEvent), opts ...WatchOption) error {
	w, err := c.WatchPrefix(ctx, prefix, opts...)
	if err != nil {
		return err
	}
	defer w.Stop()
	for b := range w.Events() {
		for _, ev := range b.Events {
			fn(ev)
		}
	}
	if err := w.Err(); err != nil {
		return err
	}
	return ctx.Err()
}

// Events delivers the watch's batches in revision order. It is closed when
// the watch ends: Stop, ctx done, or a failure reported by Err.
func (w *Watch) Events() <-chan WatchBatch { return w.events }

// Initial is the snapshot read with WithInitialSnapshot (nil without):
// the keys at revision Initial().Revision; Events continue from the next
// revision.
func (w *Watch) Initial() *RangeResult { return w.initial }

// StartRevision is the first revision whose events the watch delivers.
func (w *Watch) StartRevision() int64 { return w.start }

// Revision is the revision up to which every event has been handed to
// Events (a resumed watch continues after it).
func (w *Watch) Revision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rev
}

// Err is why Events was closed: nil after Stop, ctx's error, or a DKV
// error (ErrCompacted with Metadata["compact_revision"], ErrInvalidInput).
// It is nil while the watch runs.
func (w *Watch) Err() error {
	// Not gated on done: finish sets err before it closes Events, so a
	// caller that saw Events closed must see err, and done closes after.
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Stop ends the watch and waits for Events to be closed.
func (w *Watch) Stop() {
	w.cancel()
	<-w.done
}

// watchStream is what a watch reads its responses from: its
// subscription on the client's shared stream (watchmux.go).
type watchStream = *watchSub

// open creates the server-side watch, retrying with backoff: the first
// open up to Config.MaxRetries times, a reopen until ctx ends. The first
// open may read the snapshot; later ones resume after w.rev.
func (w *Watch) open(first bool) (watchStream, error) {
	b := newBackoff(w.c.cfg.RetryBackoff)
	for attempt := 0; ; attempt++ {
		st, err := w.tryOpen(first)
		if err == nil {
			return st, nil
		}
		if !streamRetryable(err) || w.ctx.Err() != nil || (first && attempt >= w.c.cfg.MaxRetries) {
			if w.ctx.Err() != nil {
				return nil, w.ctx.Err()
			}
			return nil, err
		}
		if !b.wait(w.ctx, 0, nil) {
			return nil, w.ctx.Err()
		}
	}
}

func (w *Watch) tryOpen(first bool) (watchStream, error) {
	req := w.req
	if !first {
		r := proto.Clone(req).(*dkvpb.WatchCreateRequest)
		r.IncludeInitialSnapshot = false
		r.StartRevision = w.Revision() + 1
		req = r
	}
	st, err := w.c.watches.subscribe(w.ctx, req)
	if err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			st.release()
		}
	}()
	resp, err := st.Recv()
	if err != nil {
		return nil, err
	}
	if resp.Canceled {
		return nil, cancelErr(resp)
	}
	if !resp.Created {
		return nil, newError(ErrInternal, "watch: first response is not created: %v", resp)
	}
	rev := resp.GetHeader().GetRevision()
	if s := req.GetStartRevision(); s > 0 && rev < s-1 {
		// A watch of a future revision (or resumed on a lagging member):
		// the header is the store's revision, events follow from s.
		rev = s - 1
	}
	if first {
		w.start = rev + 1
		w.rev = rev
		if req.IncludeInitialSnapshot {
			init := &RangeResult{Revision: rev}
			for {
				r, err := st.Recv()
				if err != nil {
					return nil, err
				}
				if r.Canceled {
					return nil, cancelErr(r)
				}
				init.KVs = append(init.KVs, fromPBs(r.Snapshot)...)
				if r.SnapshotEnd {
					break
				}
			}
			init.Count = int64(len(init.KVs))
			w.initial = init
		}
	} else if rev != w.Revision() {
		return nil, newError(ErrInternal, "watch resumed after revision %d, asked after %d", rev, w.Revision())
	}
	opened = true
	return st, nil
}

func cancelErr(r *dkvpb.WatchResponse) error {
	kind := ErrInternal
	for c, e := range codeErrors {
		if c.Reason() == r.CancelStatus {
			kind = e
		}
	}
	if r.CancelStatus == "OK" || r.CancelStatus == "" {
		return context.Canceled
	}
	e := &Error{Kind: kind, Msg: r.CancelReason}
	if r.CompactRevision > 0 {
		e.Metadata = map[string]string{"compact_revision": strconv.FormatInt(r.CompactRevision, 10)}
	}
	return e
}

func (w *Watch) finish(err error) {
	w.mu.Lock()
	if w.ctx.Err() != nil && !errors.Is(err, ErrCompacted) {
		// Stop (nil) or the caller's ctx (its error).
		err = context.Cause(w.ctx)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
	}
	w.err = err
	w.mu.Unlock()
	close(w.events)
	close(w.done)
}

// run receives, reassembles fragments, delivers per-revision batches and
// reconnects on failure.
func (w *Watch) run(st watchStream) {
	var err error
	defer func() { w.finish(err) }()
	for {
		err = w.pump(st)
		st.release()
		if w.ctx.Err() != nil || !streamRetryable(err) {
			return
		}
		st, err = w.open(false)
		if err != nil {
			return
		}
	}
}

// pump delivers from one stream until it fails.
func (w *Watch) pump(st watchStream) error {
	var partial []*dkvpb.Event
	for {
		r, err := st.Recv()
		if err != nil {
			return err
		}
		if r.Canceled {
			return cancelErr(r)
		}
		if len(r.Events) == 0 && !r.Fragment {
			if rev := r.GetHeader().GetRevision(); rev >= w.Revision() && len(partial) == 0 {
				if w.cfg.progress {
					if !w.deliver(WatchBatch{Revision: rev}) {
						return w.ctx.Err()
					}
				}
				w.setRev(rev)
			}
			continue
		}
		partial = append(partial, r.Events...)
		if r.Fragment {
			continue
		}
		evs := partial
		partial = nil
		for i := 0; i < len(evs); {
			rev := evs[i].GetKv().GetModRevision()
			j := i
			b := WatchBatch{Revision: rev}
			for ; j < len(evs) && evs[j].GetKv().GetModRevision() == rev; j++ {
				e := evs[j]
				ev := WatchEvent{Type: EventPut, KV: fromPB(e.Kv), PrevKV: fromPB(e.PrevKv), Revision: rev, Marker: QueryMarker(e.QueryMarker)}
				if e.Type == dkvpb.Event_DELETE {
					ev.Type = EventDelete
				}
				b.Events = append(b.Events, ev)
			}
			i = j
			if rev <= w.Revision() {
				return newError(ErrInternal, "watch: revision %d delivered after %d", rev, w.Revision())
			}
			if !w.deliver(b) {
				return w.ctx.Err()
			}
			w.setRev(rev)
		}
	}
}

func (w *Watch) deliver(b WatchBatch) bool {
	select {
	case w.events <- b:
		return true
	case <-w.ctx.Done():
		return false
	}
}

func (w *Watch) setRev(rev int64) {
	w.mu.Lock()
	w.rev = rev
	w.mu.Unlock()
}

// String describes the watch, for logs.
func (w *Watch) String() string {
	return fmt.Sprintf("watch %q from revision %d (at %d)", w.req.Key, w.start, w.Revision())
}
