package watch

import (
	"bytes"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/mvcc"
)

// Config configures a Hub.
type Config struct {
	// MaxQueueBytes bounds the events queued for one watcher and not yet
	// sent (default 1 MiB). A watcher whose queue is full is moved to
	// catch-up. One revision larger than the bound is still queued alone.
	MaxQueueBytes int
	// MaxPendingEvents bounds the events handed over by the apply path and
	// not yet fanned out (default 65536); beyond it they are dropped and
	// replayed from history.
	MaxPendingEvents int
	// CatchUpRevisions is how many revisions one catch-up read covers at
	// most (default 1000).
	CatchUpRevisions int64
	// MaxResponseBytes: events of several revisions are packed into one
	// response up to this size (default 1 MiB).
	MaxResponseBytes int
	// MaxFragmentBytes: a revision whose events exceed it is split into
	// fragments (default 16 MiB), so a response stays far below the gRPC
	// message limit.
	MaxFragmentBytes int
	// Header builds the header of a response at a revision; nil gives a
	// header with only the revision.
	Header func(rev int64) *dkvpb.ResponseHeader
	Logger *slog.Logger
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.MaxQueueBytes <= 0 {
		c.MaxQueueBytes = 1 << 20
	}
	if c.MaxPendingEvents <= 0 {
		c.MaxPendingEvents = 1 << 16
	}
	if c.CatchUpRevisions <= 0 {
		c.CatchUpRevisions = 1000
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = 1 << 20
	}
	if c.MaxFragmentBytes <= 0 {
		c.MaxFragmentBytes = 16 << 20
	}
	if c.Header == nil {
		c.Header = func(rev int64) *dkvpb.ResponseHeader { return &dkvpb.ResponseHeader{Revision: rev} }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Revision is the events of one revision, as the state machine made them.
type Revision struct {
	Rev    int64
	Events []mvcc.Event
}

// batch is one hand-over from the apply path: the revisions of one apply
// batch, ending at rev; gap means their events were dropped.
type batch struct {
	rev  int64
	revs []Revision
	gap  bool
}

// Snapshotter gives consistent readers of the committed state (a
// *pebble.DB).
type Snapshotter interface {
	NewSnapshot() *pebble.Snapshot
}

// Hub fans out events to watchers. Create one with New, feed it with
// Publish and Reset, and Close it when the node stops.
type Hub struct {
	cfg Config
	db  Snapshotter

	// Hand-over from the apply path.
	inMu          sync.Mutex
	pending       []batch
	pendingEvents int
	inKick        chan struct{}
	nwatchers     atomic.Int64

	mu       sync.Mutex
	rev      int64 // every revision <= rev has been fanned out
	byKey    map[string]map[*Watcher]struct{}
	ranges   map[*Watcher]struct{}
	unsynced map[*Watcher]struct{}
	touched  []*Watcher // fan-out scratch
	// progressWait holds watchers with a progress request not answered
	// yet, because the fan-out had not reached their start.
	progressWait map[*Watcher]struct{}

	catchKick chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup

	// Stats, for tests and metrics.
	gaps, catchUps, compactCancels, installWaits atomic.Int64
}

// New returns a running hub whose fan-out starts after revision rev (the
// store's committed revision) and whose catch-up reads come from db.
func New(db Snapshotter, rev int64, cfg Config) *Hub {
	cfg.EnsureDefaults()
	h := &Hub{
		cfg:          cfg,
		db:           db,
		inKick:       make(chan struct{}, 1),
		rev:          rev,
		byKey:        map[string]map[*Watcher]struct{}{},
		ranges:       map[*Watcher]struct{}{},
		unsynced:     map[*Watcher]struct{}{},
		progressWait: map[*Watcher]struct{}{},
		catchKick:    make(chan struct{}, 1),
		stop:         make(chan struct{}),
	}
	h.wg.Add(2)
	go h.fanoutLoop()
	go h.catchUpLoop()
	return h
}

// Close stops the hub's goroutines. Streams stay usable but get nothing
// new.
func (h *Hub) Close() {
	h.stopOnce.Do(func() { close(h.stop) })
	h.wg.Wait()
}

// Stats are counters for tests and metrics.
type Stats struct {
	Watchers       int64
	Gaps           int64 // hand-overs whose events were dropped
	CatchUps       int64 // catch-up reads
	CompactCancels int64 // watchers cancelled because they fell behind compaction
	InstallWaits   int64 // catch-up passes that found a raft snapshot being installed and waited
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	return Stats{Watchers: h.nwatchers.Load(), Gaps: h.gaps.Load(), CatchUps: h.catchUps.Load(), CompactCancels: h.compactCancels.Load(), InstallWaits: h.installWaits.Load()}
}

// Rev is the revision the fan-out has reached.
func (h *Hub) Rev() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// Publish hands over the revisions of one committed apply batch; rev is
// the store revision after it. It never blocks on watchers: it is called
// on the goroutine that applies committed entries, which every write
// waits for.
func (h *Hub) Publish(rev int64, revs []Revision) {
	n := 0
	for _, r := range revs {
		n += len(r.Events)
	}
	h.inMu.Lock()
	switch {
	case h.nwatchers.Load() == 0 || h.pendingEvents+n > h.cfg.MaxPendingEvents:
		// Nobody to tell (a watcher registering now reads its start from
		// history), or the hub is too far behind: keep only the revision.
		if n > 0 && h.nwatchers.Load() != 0 {
			h.gaps.Add(1)
		}
		h.pushGapLocked(rev)
	default:
		h.pending = append(h.pending, batch{rev: rev, revs: revs})
		h.pendingEvents += n
	}
	h.inMu.Unlock()
	h.kick(h.inKick)
}

// Reset says the state was replaced (a raft snapshot was installed) and
// is now at revision rev; the revisions in between are replayed from
// history.
func (h *Hub) Reset(rev int64) {
	h.inMu.Lock()
	h.pushGapLocked(rev)
	h.inMu.Unlock()
	h.kick(h.inKick)
}

func (h *Hub) pushGapLocked(rev int64) {
	if n := len(h.pending); n > 0 && h.pending[n-1].gap {
		if rev > h.pending[n-1].rev {
			h.pending[n-1].rev = rev
		}
		return
	}
	h.pending = append(h.pending, batch{rev: rev, gap: true})
}

func (h *Hub) kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (h *Hub) fanoutLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.stop:
			return
		case <-h.inKick:
		}
		h.inMu.Lock()
		bs := h.pending
		h.pending = nil
		h.pendingEvents = 0
		h.inMu.Unlock()
		for _, b := range bs {
			h.apply(b)
		}
	}
}

// apply fans one hand-over out to the synced watchers.
func (h *Hub) apply(b batch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b.rev <= h.rev && len(b.revs) == 0 {
		return
	}
	if b.gap {
		from := h.rev + 1
		for w := range h.ranges {
			h.unsyncLocked(w, max(from, w.minRev))
		}
		for _, set := range h.byKey {
			for w := range set {
				h.unsyncLocked(w, max(from, w.minRev))
			}
		}
		h.rev = max(h.rev, b.rev)
		h.answerProgressLocked()
		return
	}
	for i := range b.revs {
		r := &b.revs[i]
		if r.Rev <= h.rev {
			continue // already covered (never expected; be safe)
		}
		h.fanoutRevLocked(r)
	}
	h.rev = max(h.rev, b.rev)
	if len(h.progressWait) > 0 {
		h.answerProgressLocked()
	}
}

func (h *Hub) fanoutRevLocked(r *Revision) {
	touched := h.touched[:0]
	for i := range r.Events {
		enc := newEncoded(r.Rev, &r.Events[i])
		visit := func(w *Watcher) {
			if r.Rev < w.minRev || !w.wants(enc) {
				return
			}
			if w.cur == nil {
				w.cur = &item{kind: itemEvents, rev: r.Rev}
				touched = append(touched, w)
			}
			w.cur.events = append(w.cur.events, enc)
			w.cur.size += enc.size(w.spec.PrevKV)
		}
		for w := range h.byKey[string(enc.key)] {
			visit(w)
		}
		for w := range h.ranges {
			if w.contains(enc.key) {
				visit(w)
			}
		}
	}
	for _, w := range touched {
		it := w.cur
		w.cur = nil
		if len(w.queue) > 0 && w.qBytes+it.size > h.cfg.MaxQueueBytes {
			h.unsyncLocked(w, r.Rev)
			continue
		}
		w.enqueueLocked(it)
	}
	clear(touched)
	h.touched = touched[:0]
}

// addSyncedLocked puts w in the fan-out sets.
func (h *Hub) addSyncedLocked(w *Watcher) {
	w.state = stateSynced
	if w.single {
		set := h.byKey[string(w.key)]
		if set == nil {
			set = map[*Watcher]struct{}{}
			h.byKey[string(w.key)] = set
		}
		set[w] = struct{}{}
	} else {
		h.ranges[w] = struct{}{}
	}
}

func (h *Hub) removeSyncedLocked(w *Watcher) {
	if w.single {
		if set := h.byKey[string(w.key)]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(h.byKey, string(w.key))
			}
		}
	} else {
		delete(h.ranges, w)
	}
}

// unsyncLocked moves w to catch-up from revision next.
func (h *Hub) unsyncLocked(w *Watcher, next int64) {
	if w.state == stateSynced {
		h.removeSyncedLocked(w)
	}
	w.state = stateUnsynced
	w.nextRev = next
	h.unsynced[w] = struct{}{}
	h.kick(h.catchKick)
}

// removeLocked takes w out of the hub for good.
func (h *Hub) removeLocked(w *Watcher) {
	delete(h.progressWait, w)
	switch w.state {
	case stateSynced:
		h.removeSyncedLocked(w)
	case stateUnsynced:
		delete(h.unsynced, w)
	default:
		return
	}
	w.state = stateDone
	h.nwatchers.Add(-1)
}

// register adds w, whose first revision is start, to the hub.
func (h *Hub) registerLocked(w *Watcher, start int64) {
	h.nwatchers.Add(1)
	if start > h.rev {
		w.minRev = start
		h.addSyncedLocked(w)
		return
	}
	h.unsyncLocked(w, start)
}

// catchUpLoop replays history for watchers that are behind.
func (h *Hub) catchUpLoop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.stop:
			return
		case <-h.catchKick:
		}
		for h.catchUpPass() {
			select {
			case <-h.stop:
				return
			default:
			}
		}
	}
}

type catchUpWork struct {
	w      *Watcher
	from   int64
	room   int
	target int64
}

// catchUpPass serves every catching-up watcher whose queue has room once;
// it reports whether there may be more to do right away.
func (h *Hub) catchUpPass() bool {
	h.mu.Lock()
	var work []catchUpWork
	for w := range h.unsynced {
		if w.qBytes > h.cfg.MaxQueueBytes/2 {
			continue // resumed when the sender drains it
		}
		work = append(work, catchUpWork{w: w, from: w.nextRev, room: h.cfg.MaxQueueBytes - w.qBytes, target: h.rev})
	}
	h.mu.Unlock()
	if len(work) == 0 {
		return false
	}
	snap := h.db.NewSnapshot()
	defer snap.Close()
	if installing(snap) {
		// A raft snapshot is being installed: the state is half replaced
		// (the old one deleted, the new one partly written, in several
		// batches), so history and change log may lack revisions that
		// exist. A read now would move watchers past them and lose their
		// events. Wait until the install's last batch, which clears the
		// marker atomically with the rest of the new state.
		h.installWaits.Add(1)
		select {
		case <-h.stop:
		case <-time.After(installPoll):
		}
		return true
	}
	_, comp, err := mvcc.Counters(snap)
	if err != nil {
		h.cfg.Logger.Error("watch catch-up: reading counters", "err", err)
		time.Sleep(100 * time.Millisecond)
		return true
	}
	more := false
	for _, wk := range work {
		// The compact revision itself is kept (its change log and the
		// versions it wrote), but not the versions before it that its
		// events' prev_kv would be.
		if wk.from < comp || (wk.from == comp && wk.w.spec.PrevKV) {
			h.cancelCompacted(wk.w, wk.from, comp)
			continue
		}
		to := min(wk.target, wk.from+h.cfg.CatchUpRevisions-1)
		var items []*item
		next := max(to+1, wk.from)
		acc := 0
		w := wk.w
		h.catchUps.Add(1)
		err := mvcc.ReadEvents(snap, wk.from, to, w.contains, w.spec.PrevKV, func(rev int64, evs []mvcc.Event) bool {
			it := &item{kind: itemEvents, rev: rev}
			for i := range evs {
				enc := newEncoded(rev, &evs[i])
				if !w.wants(enc) {
					continue
				}
				it.events = append(it.events, enc)
				it.size += enc.size(w.spec.PrevKV)
			}
			if len(it.events) == 0 {
				return true
			}
			if acc > 0 && acc+it.size > wk.room {
				next = rev
				return false
			}
			acc += it.size
			items = append(items, it)
			return true
		})
		if err != nil {
			h.cfg.Logger.Error("watch catch-up: reading history", "from", wk.from, "to", to, "err", err)
			h.cancelWith(w, &dkvpb.WatchResponse{Canceled: true, CancelStatus: "INTERNAL", CancelReason: "reading history: " + err.Error()})
			continue
		}
		if h.deliverCatchUp(w, wk.from, items, next) {
			more = true
		}
	}
	return more
}

// deliverCatchUp queues replayed items for w if it is still catching up
// from from, and moves it to synced if it reached the fan-out. It reports
// whether w still needs more catch-up now.
func (h *Hub) deliverCatchUp(w *Watcher, from int64, items []*item, next int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.state != stateUnsynced || w.nextRev != from {
		return false
	}
	for _, it := range items {
		w.enqueueLocked(it)
	}
	w.nextRev = next
	if next > h.rev {
		delete(h.unsynced, w)
		w.minRev = next
		h.addSyncedLocked(w)
		return false
	}
	return w.qBytes <= h.cfg.MaxQueueBytes/2
}

func (h *Hub) cancelCompacted(w *Watcher, from, comp int64) {
	h.compactCancels.Add(1)
	reason := compactedReason(from, comp)
	if from == comp {
		reason = compactedPrevKVReason(from)
	}
	h.cancelWith(w, &dkvpb.WatchResponse{
		Canceled: true, CancelStatus: "COMPACTED", CompactRevision: comp,
		CancelReason: reason,
	})
}

func compactedPrevKVReason(rev int64) string {
	return "revision " + itoa(rev) + " is the compact revision: its events can be watched, but not with prev_kv (the versions before it are compacted); start at " + itoa(rev+1) + " or watch without prev_kv"
}

// CompactedPrevKVError refuses a watch with prev_kv that starts at the
// compact revision comp (rev == comp); it carries "compact_revision".
func CompactedPrevKVError(rev, comp int64) error {
	e := dkverr.New(dkverr.Compacted, "%s", compactedPrevKVReason(rev))
	e.Metadata = map[string]string{"compact_revision": itoa(comp)}
	return e
}

// cancelWith ends w: its queued events are dropped (the client must
// re-list anyway) and resp is its last response.
func (h *Hub) cancelWith(w *Watcher, resp *dkvpb.WatchResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.state == stateDone {
		return
	}
	h.removeLocked(w)
	w.queue = nil
	w.qBytes = 0
	resp.WatchId = w.id
	resp.Header = h.cfg.Header(h.rev)
	w.enqueueLocked(&item{kind: itemControl, resp: resp, last: true})
}

func compactedReason(from, comp int64) string {
	return "revision " + itoa(from) + " has been compacted (compact revision " + itoa(comp) + ")"
}

func itoa(v int64) string {
	var b [20]byte
	i := len(b)
	neg := v < 0
	if neg {
		v = -v
	}
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// contains reports whether key is in w's range.
func (w *Watcher) contains(key []byte) bool {
	if w.single {
		return bytes.Equal(key, w.key)
	}
	return bytes.Compare(key, w.key) >= 0 && (w.end == nil || bytes.Compare(key, w.end) < 0)
}

// installPoll is how often catch-up looks again while a raft snapshot is
// being installed.
const installPoll = 10 * time.Millisecond

// installing reports whether r shows a raft snapshot install under way
// (package storage sets the marker, synced, before it touches the state
// and deletes it in the batch that writes the last of the new state).
func installing(r pebble.Reader) bool {
	_, c, err := r.Get(keys.SnapshotInstalling)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
