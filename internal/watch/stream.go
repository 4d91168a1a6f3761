package watch

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/mvcc"
)

// DefaultProgressInterval is the idle time after which a watch with
// progress notifications gets one.
const DefaultProgressInterval = 10 * time.Second

// Spec is what a watch asks for.
type Spec struct {
	// ID is the client's watch id; 0 lets the stream assign one.
	ID       int64
	Key      []byte
	RangeEnd []byte
	Prefix   bool
	PrevKV   bool
	// FilterPuts / FilterDeletes leave out events of that type.
	FilterPuts, FilterDeletes bool
	ProgressNotify            bool
	ProgressInterval          time.Duration
	// Fragment caps the events per response (0: no cap).
	Fragment int
	// Query, when set, makes this a watch by query: of the events in
	// its range it delivers those of keys entering, changing within or
	// leaving the query's result, each marked (queryMarker). It needs
	// PrevKV (the previous version decides "was in the result").
	Query *mvcc.Query
}

// ErrDuplicateID: the client chose a watch id already in use on the stream.
var ErrDuplicateID = errors.New("watch id already in use on this stream")

type watcherState int

const (
	stateNew watcherState = iota
	stateSynced
	stateUnsynced
	stateDone
)

// Watcher is one watch on a Stream.
type Watcher struct {
	id     int64
	spec   Spec
	key    []byte
	end    []byte // nil: unbounded (for a range)
	single bool
	stream *Stream

	// Guarded by Hub.mu.
	state    watcherState
	minRev   int64 // synced: events below it are not for this watcher
	nextRev  int64 // catching up: the next revision to replay
	queue    []*item
	qBytes   int
	cur      *item // fan-out scratch
	inDirty  bool
	lastSent time.Time
}

// ID is the watch id.
func (w *Watcher) ID() int64 { return w.id }

func (w *Watcher) wants(e *encoded) bool {
	if w.spec.Query != nil && queryMarker(w.spec.Query, e.ev) == dkvpb.Event_QUERY_NONE {
		return false
	}
	if e.ev.Type == mvcc.EventPut {
		return !w.spec.FilterPuts
	}
	return !w.spec.FilterDeletes
}

func (w *Watcher) enqueueLocked(it *item) {
	w.queue = append(w.queue, it)
	w.qBytes += it.size
	if w.stream != nil && !w.inDirty {
		w.inDirty = true
		w.stream.dirty = append(w.stream.dirty, w)
		select {
		case w.stream.ready <- struct{}{}:
		default:
		}
	}
}

type itemKind int

const (
	itemEvents itemKind = iota
	itemProgress
	itemControl
)

// item is one queued unit for a watcher: the events of one revision, a
// progress notification or a prepared response.
type item struct {
	kind   itemKind
	rev    int64
	events []*encoded
	resp   *dkvpb.WatchResponse
	size   int
	last   bool // the watcher ends after this item
}

// encoded is one event, encoded at most once per prev_kv variant however
// many watchers send it: as WatchResponse field 11 (tag, length, Event).
type encoded struct {
	rev            int64
	key            []byte
	ev             *mvcc.Event
	once, oncePrev sync.Once
	b, bPrev       []byte
}

func newEncoded(rev int64, ev *mvcc.Event) *encoded {
	return &encoded{rev: rev, key: ev.KV.GetKey(), ev: ev}
}

// size estimates the bytes an event holds in a queue.
func (e *encoded) size(prev bool) int {
	n := 48 + len(e.ev.KV.GetKey()) + len(e.ev.KV.GetValue())
	if prev && e.ev.PrevKV != nil {
		n += 32 + len(e.ev.PrevKV.GetKey()) + len(e.ev.PrevKV.GetValue())
	}
	return n
}

func (e *encoded) bytes(prev bool) []byte {
	if prev {
		e.oncePrev.Do(func() { e.bPrev = encodeEvent(e.ev, true) })
		return e.bPrev
	}
	e.once.Do(func() { e.b = encodeEvent(e.ev, false) })
	return e.b
}

const eventsField protowire.Number = 11 // WatchResponse.events

// encodes counts event encodings (tests check fan-out encodes once).
var encodes atomic.Int64

// queryMarker is how ev relates to q's result: ENTER (the previous
// version did not match, the new one does), CHANGE (both match), LEAVE
// (the previous matched; the new one does not or the key was deleted),
// or QUERY_NONE (neither matched: not the watch's business).
func queryMarker(q *mvcc.Query, ev *mvcc.Event) dkvpb.Event_QueryMarker {
	was := ev.PrevKV != nil && q.Matches(ev.PrevKV.GetKey(), ev.PrevKV.GetLabels())
	is := ev.Type == mvcc.EventPut && q.Matches(ev.KV.GetKey(), ev.KV.GetLabels())
	switch {
	case was && is:
		return dkvpb.Event_CHANGE
	case is:
		return dkvpb.Event_ENTER
	case was:
		return dkvpb.Event_LEAVE
	}
	return dkvpb.Event_QUERY_NONE
}

func encodeEvent(ev *mvcc.Event, prev bool) []byte {
	return encodeEventMarked(ev, prev, dkvpb.Event_QUERY_NONE)
}

// encodeEventMarked encodes ev with a query marker: per watcher, since the
// marker depends on the watcher's query.
func encodeEventMarked(ev *mvcc.Event, prev bool, marker dkvpb.Event_QueryMarker) []byte {
	encodes.Add(1)
	m := &dkvpb.Event{Type: dkvpb.Event_PUT, Kv: ev.KV, QueryMarker: marker}
	if ev.Type == mvcc.EventDelete {
		m.Type = dkvpb.Event_DELETE
	}
	if prev {
		m.PrevKv = ev.PrevKV
	}
	n := proto.Size(m)
	b := protowire.AppendTag(make([]byte, 0, n+12), eventsField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	if err != nil {
		panic("watch: encoding an event: " + err.Error())
	}
	return b
}

// Stream is the hub side of one client stream: its watches and their
// queued responses, which the stream's sender takes with Pop.
type Stream struct {
	h     *Hub
	ready chan struct{}

	// Guarded by Hub.mu.
	watchers map[int64]*Watcher
	dirty    []*Watcher
	nextID   int64
	closed   bool
}

// NewStream returns a stream with no watches.
func (h *Hub) NewStream() *Stream {
	return &Stream{h: h, ready: make(chan struct{}, 1), watchers: map[int64]*Watcher{}}
}

// Ready receives a value when responses may be waiting for Pop.
func (s *Stream) Ready() <-chan struct{} { return s.ready }

// Len is the number of live watches on the stream.
func (s *Stream) Len() int {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return len(s.watchers)
}

// Add creates a watch that receives every event of its range with
// revision >= start, after the responses in pre (created, snapshot). The
// caller has checked start against the compact revision (catch-up checks
// it again). The watch id is spec.ID or, if 0, a free one.
func (s *Stream) Add(spec Spec, start int64, pre func(id int64) []*dkvpb.WatchResponse) (*Watcher, error) {
	h := s.h
	w := &Watcher{spec: spec, stream: s, key: spec.Key}
	switch {
	case spec.Prefix:
		w.end = keyrange.PrefixEnd(spec.Key)
	case len(spec.RangeEnd) == 0:
		w.single = true
	case len(spec.RangeEnd) == 1 && spec.RangeEnd[0] == 0:
		w.end = nil
	default:
		w.end = spec.RangeEnd
	}
	if w.spec.ProgressInterval <= 0 {
		w.spec.ProgressInterval = DefaultProgressInterval
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return nil, errors.New("watch stream closed")
	}
	if spec.ID != 0 {
		if _, ok := s.watchers[spec.ID]; ok {
			return nil, ErrDuplicateID
		}
		w.id = spec.ID
	} else {
		for {
			s.nextID++
			if _, ok := s.watchers[s.nextID]; !ok {
				break
			}
		}
		w.id = s.nextID
	}
	s.watchers[w.id] = w
	if pre != nil {
		for _, r := range pre(w.id) {
			w.enqueueLocked(&item{kind: itemControl, resp: r, size: proto.Size(r)})
		}
	}
	w.lastSent = time.Now()
	h.registerLocked(w, start)
	return w, nil
}

// Cancel ends watch id with a canceled response; it reports false if
// there is no such watch. Events not yet sent are dropped.
func (s *Stream) Cancel(id int64) bool {
	s.h.mu.Lock()
	w, ok := s.watchers[id]
	done := ok && w.state == stateDone
	s.h.mu.Unlock()
	if !ok || done {
		return false
	}
	s.h.cancelWith(w, &dkvpb.WatchResponse{Canceled: true, CancelStatus: "OK", CancelReason: "cancelled by the client"})
	return true
}

// Close removes every watch of the stream from the hub.
func (s *Stream) Close() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	s.closed = true
	for _, w := range s.watchers {
		h.removeLocked(w)
		w.queue = nil
	}
	s.watchers = map[int64]*Watcher{}
	s.dirty = nil
}

// RequestProgress queues a progress response on every watch.
func (s *Stream) RequestProgress() {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range s.watchers {
		if rev, ok := h.progressRevLocked(w); ok {
			w.enqueueLocked(&item{kind: itemProgress, rev: rev, size: 16})
		} else if w.state != stateDone {
			// The fan-out has not reached the watch's start yet (it
			// trails the applied revision briefly after writes): answer
			// when it does, as etcd defers a progress request until its
			// watchers are synced. Dropping it would leave the client
			// waiting for an answer that never comes.
			h.progressWait[w] = struct{}{}
		}
	}
}

// NotifyIdle queues a progress response on every up-to-date watch with
// progress notifications that has sent nothing for its interval. It
// returns the shortest such interval (0 if none), for the caller's timer.
func (s *Stream) NotifyIdle(now time.Time) time.Duration {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	var shortest time.Duration
	for _, w := range s.watchers {
		if !w.spec.ProgressNotify {
			continue
		}
		if shortest == 0 || w.spec.ProgressInterval < shortest {
			shortest = w.spec.ProgressInterval
		}
		if w.state != stateSynced || len(w.queue) > 0 || now.Sub(w.lastSent) < w.spec.ProgressInterval {
			continue
		}
		if rev, ok := h.progressRevLocked(w); ok {
			w.lastSent = now
			w.enqueueLocked(&item{kind: itemProgress, rev: rev, size: 16})
		}
	}
	return shortest
}

// progressRevLocked is the revision up to which every event of w is
// queued.
func (h *Hub) progressRevLocked(w *Watcher) (int64, bool) {
	switch w.state {
	case stateSynced:
		if h.rev < w.minRev-1 {
			return 0, false // starts in the future: nothing to promise yet
		}
		return h.rev, true
	case stateUnsynced:
		if w.nextRev-1 > h.rev {
			return 0, false // likewise
		}
		return w.nextRev - 1, true
	}
	return 0, false
}

// answerProgressLocked queues the deferred progress responses whose
// watchers the fan-out has now reached.
func (h *Hub) answerProgressLocked() {
	for w := range h.progressWait {
		if rev, ok := h.progressRevLocked(w); ok {
			w.enqueueLocked(&item{kind: itemProgress, rev: rev, size: 16})
			delete(h.progressWait, w)
		}
	}
}

// Pop takes the queued responses of one watch (round-robin over the
// stream's watches), at most about MaxResponseBytes of events; nil when
// nothing is queued.
func (s *Stream) Pop() []*dkvpb.WatchResponse {
	h := s.h
	h.mu.Lock()
	if len(s.dirty) == 0 {
		h.mu.Unlock()
		return nil
	}
	w := s.dirty[0]
	s.dirty[0] = nil
	s.dirty = s.dirty[1:]
	w.inDirty = false
	n, size := 0, 0
	last := false
	for n < len(w.queue) {
		it := w.queue[n]
		if n > 0 && size+it.size > h.cfg.MaxResponseBytes {
			break
		}
		size += it.size
		n++
		if it.last {
			last = true
			break
		}
	}
	items := w.queue[:n:n]
	if n == len(w.queue) {
		w.queue = nil
	} else {
		w.queue = w.queue[n:]
	}
	w.qBytes -= size
	if len(w.queue) > 0 && !last {
		w.inDirty = true
		s.dirty = append(s.dirty, w)
	}
	if last {
		if s.watchers[w.id] == w {
			delete(s.watchers, w.id)
		}
	}
	if w.state == stateUnsynced && w.qBytes <= h.cfg.MaxQueueBytes/2 {
		h.kick(h.catchKick)
	}
	w.lastSent = time.Now()
	h.mu.Unlock()
	return h.build(w, items)
}

// build turns queued items into responses: the events of consecutive
// revisions share a response up to MaxResponseBytes; a revision over
// Fragment events or MaxFragmentBytes is split into fragments.
func (h *Hub) build(w *Watcher, items []*item) []*dkvpb.WatchResponse {
	var out []*dkvpb.WatchResponse
	var raw []byte
	var lastRev int64
	nev := 0
	flush := func(fragment bool) {
		if nev == 0 {
			return
		}
		r := &dkvpb.WatchResponse{Header: h.cfg.Header(lastRev), WatchId: w.id, Fragment: fragment}
		r.ProtoReflect().SetUnknown(raw)
		out = append(out, r)
		raw, nev = nil, 0
	}
	frag := w.spec.Fragment
	for _, it := range items {
		switch it.kind {
		case itemControl:
			flush(false)
			out = append(out, it.resp)
		case itemProgress:
			flush(false)
			out = append(out, &dkvpb.WatchResponse{Header: h.cfg.Header(it.rev), WatchId: w.id})
		case itemEvents:
			if nev > 0 && ((frag > 0 && nev+len(it.events) > frag) || len(raw)+it.size > h.cfg.MaxResponseBytes) {
				flush(false)
			}
			lastRev = it.rev
			for _, e := range it.events {
				if nev > 0 && ((frag > 0 && nev >= frag) || len(raw) >= h.cfg.MaxFragmentBytes) {
					flush(true)
				}
				b := e.bytes(w.spec.PrevKV)
				if w.spec.Query != nil {
					b = encodeEventMarked(e.ev, w.spec.PrevKV, queryMarker(w.spec.Query, e.ev))
				}
				if nev == 0 {
					raw = b[:len(b):len(b)] // shared, and append must copy
				} else {
					raw = append(raw, b...)
				}
				nev++
			}
		}
	}
	flush(false)
	return out
}
