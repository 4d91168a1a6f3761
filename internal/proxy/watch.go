package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// watchHub answers DKV's Watch service: it maps local watches onto
// groups, each group one upstream watch.
type watchHub struct {
	dkvpb.UnimplementedWatchServer
	p *Proxy

	mu     sync.Mutex
	groups map[string]*group // the shareable group of each key

	local, upstream atomic.Int64 // the metrics
}

// localStream is one local client's Watch stream, DKV's or etcd's
// (etcdwatch.go). Every watch on it has the stream's metadata, so they
// all have the same identity.
type localStream struct {
	h     *watchHub
	md    metadata.MD
	ident string
	// etcd: the stream is etcd's Watch; what is queued for it is
	// translated to etcd's responses on the way in (enqueue).
	etcd bool

	mu      sync.Mutex
	q       []proto.Message // to send, in order: *dkvpb or *etcdserverpb.WatchResponse
	err     error           // after q: why the stream ends
	closed  bool
	watches map[int64]*member
	nextID  int64
	signal  chan struct{}
}

// member is one local watch in a group.
type member struct {
	ls *localStream
	id int64
	g  atomic.Pointer[group]

	// Under g.mu:
	start   int64 // its first revision; 0 until the group knows it
	created bool  // its created response is queued
	gone    bool  // left the group

	// answered is closed once its created response, or its refusal, is
	// queued: an etcd stream handles its next request only then
	// (etcdwatch.go).
	answered     chan struct{}
	answeredOnce sync.Once
}

func (m *member) answer() { m.answeredOnce.Do(func() { close(m.answered) }) }

func (h *watchHub) newStream(ctx context.Context, etcd bool) *localStream {
	md := passMD(ctx)
	return &localStream{h: h, md: md, ident: identity(md), etcd: etcd, watches: map[int64]*member{}, signal: make(chan struct{}, 1)}
}

func (h *watchHub) Watch(stream dkvpb.Watch_WatchServer) error {
	ls := h.newStream(stream.Context(), false)
	defer ls.close()
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				if err != io.EOF {
					ls.fail(err)
				}
				return // half-close: the watches keep running
			}
			switch r := req.GetRequestUnion().(type) {
			case *dkvpb.WatchRequest_CreateRequest:
				h.create(ls, r.CreateRequest)
			case *dkvpb.WatchRequest_CancelRequest:
				ls.cancel(r.CancelRequest.GetWatchId())
			case *dkvpb.WatchRequest_ProgressRequest:
				ls.requestProgress()
			}
		}
	}()
	return ls.pump(stream.Context(), func(r proto.Message) error { return stream.Send(r.(*dkvpb.WatchResponse)) })
}

// pump sends what is queued on ls until the stream ends.
func (ls *localStream) pump(ctx context.Context, send func(proto.Message) error) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ls.h.p.ctx.Done():
			return status.Error(codes.Unavailable, "the proxy is stopping")
		case <-ls.signal:
		}
		q, err := ls.take()
		for _, r := range q {
			if err := send(r); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
}

func (ls *localStream) notify() {
	select {
	case ls.signal <- struct{}{}:
	default:
	}
}

// enqueue queues r for sending, as etcd's response(s) on an etcd stream.
func (ls *localStream) enqueue(r *dkvpb.WatchResponse) {
	if ls.etcd {
		ls.push(toEtcdWatchResponses(r)...)
		return
	}
	ls.push(r)
}

// push queues rs, ready to send. A stream that falls MaxLocalQueue
// responses behind ends with Unavailable: its client resumes each watch
// after the last revision it got, so nothing is lost, and no group waits
// for it.
func (ls *localStream) push(rs ...proto.Message) {
	ls.mu.Lock()
	switch {
	case ls.err != nil || ls.closed:
	case len(ls.q)+len(rs) > ls.h.p.cfg.MaxLocalQueue:
		ls.q = nil
		ls.err = status.Error(codes.Unavailable, "the watch stream fell behind the proxy; resume from the last revision received")
	default:
		ls.q = append(ls.q, rs...)
	}
	ls.mu.Unlock()
	ls.notify()
}

// fail ends the stream with err once what is queued is sent.
func (ls *localStream) fail(err error) {
	ls.mu.Lock()
	if ls.err == nil {
		ls.err = err
	}
	ls.mu.Unlock()
	ls.notify()
}

func (ls *localStream) take() ([]proto.Message, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	q := ls.q
	ls.q = nil
	return q, ls.err
}

// add registers a watch id (0: the proxy picks one) on the stream.
func (ls *localStream) add(id int64) (*member, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return nil, false
	}
	if id == 0 {
		for ls.nextID++; ls.watches[ls.nextID] != nil; ls.nextID++ {
		}
		id = ls.nextID
	}
	if ls.watches[id] != nil {
		return nil, false
	}
	m := &member{ls: ls, id: id, answered: make(chan struct{})}
	ls.watches[id] = m
	ls.h.local.Add(1)
	return m, true
}

// forget removes m from the stream, if it is still there.
func (ls *localStream) forget(m *member) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.watches[m.id] != m {
		return false
	}
	delete(ls.watches, m.id)
	ls.h.local.Add(-1)
	return true
}

func (ls *localStream) isClosed() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.closed
}

// close takes every watch of the stream out of its group.
func (ls *localStream) close() {
	ls.mu.Lock()
	ls.closed = true
	ms := make([]*member, 0, len(ls.watches))
	for _, m := range ls.watches {
		ms = append(ms, m)
	}
	ls.mu.Unlock()
	for _, m := range ms {
		ls.forget(m)
		if m.g.Load() != nil {
			m.leave()
		}
	}
}

func (ls *localStream) cancel(id int64) {
	ls.mu.Lock()
	m := ls.watches[id]
	ls.mu.Unlock()
	if m == nil || !ls.forget(m) {
		return // like a member: cancelling an unknown watch is a no-op
	}
	m.leave()
	ls.enqueue(&dkvpb.WatchResponse{Header: m.g.Load().currentHeader(), WatchId: id, Canceled: true, CancelStatus: "OK", CancelReason: "cancelled by the client"})
}

func (ls *localStream) requestProgress() {
	ls.mu.Lock()
	ms := make([]*member, 0, len(ls.watches))
	for _, m := range ls.watches {
		ms = append(ms, m)
	}
	ls.mu.Unlock()
	for _, m := range ms {
		if m.g.Load() != nil {
			m.requestProgress()
		}
	}
}

// create places a new local watch: in the shareable group of its key if
// that group will deliver every revision the watch needs, else in a new
// group of its own, which hands its watches to the shared group once it
// has caught up with it. A watch with an initial snapshot starts in a
// group of its own too (the snapshot is its own read); so does one the
// upstream will refuse (a negative start), so that the refusal reaches
// it alone.
//
// It returns the new watch, or nil if it was refused at once.
func (h *watchHub) create(ls *localStream, req *dkvpb.WatchCreateRequest) *member {
	if req.WatchId < 0 {
		ls.enqueue(refusal(req.WatchId, "INVALID_INPUT", fmt.Sprintf("watch_id is %d; it must not be negative", req.WatchId)))
		return nil
	}
	m, ok := ls.add(req.WatchId)
	if !ok {
		ls.enqueue(refusal(req.WatchId, "INVALID_INPUT", fmt.Sprintf("watch id %d is already in use on this stream", req.WatchId)))
		return nil
	}
	m.start = max(req.StartRevision, 0)
	greq := proto.Clone(req).(*dkvpb.WatchCreateRequest)
	greq.WatchId = 0
	switch {
	case req.StartRevision < 0:
		h.startGroup("", "", ls.md, greq, m) // for the upstream's refusal
	case req.IncludeInitialSnapshot:
		// The snapshot is this watch's own read; afterwards it may join
		// the group of the same watch without one.
		greq.StartRevision, m.start = 0, 0 // ignored with a snapshot
		plain := proto.Clone(greq).(*dkvpb.WatchCreateRequest)
		plain.IncludeInitialSnapshot = false
		h.startGroup("", groupKey(ls.ident, plain), ls.md, greq, m)
	default:
		key := groupKey(ls.ident, req)
		h.mu.Lock()
		g := h.groups[key]
		switch {
		case g != nil && g.join(m, req.StartRevision):
		case g == nil || g.isDone():
			h.groups[key] = h.startGroup(key, key, ls.md, greq, m)
		default:
			// It needs history the group has passed: its own upstream
			// watch catches up, then hands it to the group (merge).
			h.startGroup("", key, ls.md, greq, m)
		}
		h.mu.Unlock()
	}
	if ls.isClosed() {
		// The stream ended while m was placed; its close may have missed m.
		m.leave()
	}
	return m
}

func refusal(id int64, st, reason string) *dkvpb.WatchResponse {
	return &dkvpb.WatchResponse{Header: &dkvpb.ResponseHeader{}, WatchId: id, Created: true, Canceled: true, CancelStatus: st, CancelReason: reason}
}

// groupKey is what watches must share to share a group: the caller's
// identity and every option but the watch id and the start revision. A
// prefix is keyed as the range it is, [prefix, its end) ("\x00": every
// key from it on), as a member reads it (storekeys.Mapper.Range), so
// that DKV's prefix watches share with etcd's, which name the range.
func groupKey(ident string, req *dkvpb.WatchCreateRequest) string {
	r := proto.Clone(req).(*dkvpb.WatchCreateRequest)
	r.WatchId, r.StartRevision = 0, 0
	if r.Prefix && len(r.RangeEnd) == 0 && r.Query == "" {
		r.Prefix, r.RangeEnd = false, keyrange.PrefixEnd(r.Key)
		if r.RangeEnd == nil {
			r.RangeEnd = []byte{0}
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		panic(err) // a message just decoded always encodes
	}
	return ident + "\x00" + string(b)
}

// group is one upstream watch and the local watches it serves.
type group struct {
	h      *watchHub
	key    string // "" for a group nobody joins
	share  string // the key of the group this one may merge into ("": none)
	md     metadata.MD
	req    *dkvpb.WatchCreateRequest // as first asked, watch id 0
	ctx    context.Context
	cancel context.CancelFunc

	sendMu sync.Mutex
	up     dkvpb.Watch_WatchClient // the current upstream stream, if any

	mu       sync.Mutex
	members  map[*member]struct{}
	created  bool
	rev      int64 // every event <= rev is broadcast; a revision the store has reached
	header   *dkvpb.ResponseHeader
	frag     []*dkvpb.WatchResponse // fragments of a revision not yet complete
	snapDone bool
	progress []*member // asked for progress, one upstream request each, in order
	done     bool
}

// startGroup starts a group for m. The caller holds h.mu if key is set.
func (h *watchHub) startGroup(key, share string, md metadata.MD, req *dkvpb.WatchCreateRequest, m *member) *group {
	g := &group{h: h, key: key, share: share, md: md, req: req, members: map[*member]struct{}{}}
	g.ctx, g.cancel = context.WithCancel(h.p.ctx)
	g.mu.Lock()
	g.addLocked(m)
	g.mu.Unlock()
	h.upstream.Add(1)
	h.p.wg.Add(1)
	go g.run()
	return g
}

// next is the first revision the group will deliver, 0 while unknown.
func (g *group) next() int64 {
	if !g.created {
		return g.req.StartRevision
	}
	return max(g.req.StartRevision, g.rev+1)
}

// join adds m, a watch from start (0: from now), if the group will
// deliver every revision it needs.
func (g *group) join(m *member, start int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ok bool
	switch {
	case g.done:
	case start == 0 && g.req.StartRevision == 0:
		// The group's "now" is no later than this watch's: it may see
		// a few events from just before it was created, never miss one.
		ok = true
	case start == 0:
		ok = g.created && g.req.StartRevision <= g.rev+1
	default:
		n := g.next()
		ok = n > 0 && start >= n
	}
	if ok {
		g.addLocked(m)
	}
	return ok
}

func (g *group) isCreated() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.created
}

func (g *group) isDone() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done
}

func (g *group) addLocked(m *member) {
	m.g.Store(g)
	g.members[m] = struct{}{}
	if g.created {
		g.sendCreatedLocked(m)
	}
}

// currentHeader is the latest upstream header at the group's revision.
func (g *group) currentHeader() *dkvpb.ResponseHeader {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.headerAtLocked(g.rev)
}

func (g *group) headerAtLocked(rev int64) *dkvpb.ResponseHeader {
	h := &dkvpb.ResponseHeader{}
	if g.header != nil {
		h = proto.Clone(g.header).(*dkvpb.ResponseHeader)
	}
	h.Revision = rev
	return h
}

// sendCreatedLocked tells m its watch exists: events follow after the
// revision in the header, as from a member.
func (g *group) sendCreatedLocked(m *member) {
	rev := g.rev
	if m.start == 0 {
		m.start = g.rev + 1
	} else {
		rev = min(m.start-1, g.rev)
	}
	m.created = true
	defer m.answer()
	m.ls.enqueue(&dkvpb.WatchResponse{Header: g.headerAtLocked(rev), WatchId: m.id, Created: true})
}

// lockGroup locks and returns the group m is in. A merge may move m
// between reading m.g and locking, so it checks again under the lock;
// merges only move members forward to a shared group, so it settles.
func (m *member) lockGroup() *group {
	for {
		g := m.g.Load()
		g.mu.Lock()
		if m.g.Load() == g {
			return g
		}
		g.mu.Unlock()
	}
}

// leave takes m out of its group; the last one out cancels the upstream
// watch.
func (m *member) leave() {
	g := m.lockGroup()
	if m.gone {
		g.mu.Unlock()
		return
	}
	m.gone = true
	delete(g.members, m)
	last := len(g.members) == 0 && !g.done
	if last {
		g.done = true
	}
	g.mu.Unlock()
	if last {
		g.finish()
	}
}

// finish ends the upstream watch and makes the key free for a new group.
func (g *group) finish() {
	g.cancel()
	if g.key == "" {
		return
	}
	g.h.mu.Lock()
	if g.h.groups[g.key] == g {
		delete(g.h.groups, g.key)
	}
	g.h.mu.Unlock()
}

// end ends the group for every member, telling each with tell, and
// removes them from their streams.
func (g *group) end(tell func(m *member)) {
	g.mu.Lock()
	if g.done && len(g.members) == 0 {
		g.mu.Unlock()
		return
	}
	g.done = true
	ms := make([]*member, 0, len(g.members))
	for m := range g.members {
		m.gone = true
		tell(m)
		m.answer()
		ms = append(ms, m)
	}
	clear(g.members)
	g.mu.Unlock()
	g.finish()
	for _, m := range ms {
		m.ls.forget(m)
	}
}

// requestProgress asks the upstream watch of m's group for a progress
// response, which goes to m.
func (m *member) requestProgress() {
	g := m.lockGroup()
	if m.gone || !m.created {
		g.mu.Unlock()
		return
	}
	g.progress = append(g.progress, m)
	g.mu.Unlock()
	g.sendMu.Lock()
	defer g.sendMu.Unlock()
	if g.up != nil {
		// A failure shows on the stream's Recv; the resumed stream asks
		// again for every request still waiting.
		g.up.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_ProgressRequest{ProgressRequest: &dkvpb.WatchProgressRequest{}}})
	}
}

// retryable says whether an upstream watch that failed with err resumes
// (on any member); otherwise its local streams end with err, as they
// would have on the member (an expired token, revoked permissions).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown, codes.ResourceExhausted:
		return true
	}
	return false
}

// run keeps the group's upstream watch open until the group ends,
// resuming it after the last revision broadcast when it fails.
func (g *group) run() {
	defer g.h.p.wg.Done()
	defer g.h.upstream.Add(-1)
	defer g.cancel()
	var b backoff
	for {
		healthy, err := g.stream()
		if g.ctx.Err() != nil {
			return
		}
		if healthy {
			b.reset()
		}
		g.mu.Lock()
		midSnapshot := g.req.IncludeInitialSnapshot && !g.snapDone
		g.mu.Unlock()
		if !retryable(err) || midSnapshot {
			// A snapshot cut short cannot be resumed here; the client
			// resumes (or starts over) itself.
			g.end(func(m *member) { m.ls.fail(err) })
			return
		}
		g.h.p.metrics.resumes.Inc()
		d := b.next()
		g.h.p.log.Info("upstream watch failed; resuming", "err", err, "after", d)
		if !sleep(g.ctx, d) {
			return
		}
	}
}

// backoff is the wait before the next attempt at an upstream stream: it
// doubles from 25ms up to a second, and starts over after an attempt
// that worked.
type backoff struct{ d time.Duration }

func (b *backoff) reset() { b.d = 0 }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 25*time.Millisecond), time.Second)
	return b.d
}

// sleep waits d; false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

var errEnded = errors.New("upstream watch ended")

// stream runs one upstream stream until it fails or the group ends. It
// reports whether the upstream created the watch.
func (g *group) stream() (bool, error) {
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(g.ctx, g.md))
	defer cancel()
	up, err := dkvpb.NewWatchClient(g.h.p.conn).Watch(ctx)
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	req := proto.Clone(g.req).(*dkvpb.WatchCreateRequest)
	if g.created {
		req.StartRevision, req.IncludeInitialSnapshot = g.next(), false
	}
	req.WatchId = 1
	asks := len(g.progress)
	g.frag = nil // a revision is broadcast whole or not at all
	g.mu.Unlock()
	g.sendMu.Lock()
	err = up.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: req}})
	for i := 0; i < asks && err == nil; i++ {
		err = up.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_ProgressRequest{ProgressRequest: &dkvpb.WatchProgressRequest{}}})
	}
	if err == nil {
		g.up = up
	}
	g.sendMu.Unlock()
	defer func() {
		g.sendMu.Lock()
		g.up = nil
		g.sendMu.Unlock()
	}()
	created := false
	for {
		resp, err := up.Recv()
		if err != nil {
			return created, err
		}
		if resp.Canceled && resp.CancelStatus == dkverr.Unavailable.Reason() && g.isCreated() {
			// A member without a leader refused to resume the watch:
			// try another rather than cancel every local watch.
			return created, status.Error(codes.Unavailable, resp.CancelReason)
		}
		created = created || resp.Created
		if !g.handle(resp) {
			return created, errEnded
		}
		if g.share != "" && g.merge() {
			return created, errEnded
		}
	}
}

// merge hands g's watches to the shared group of its key if that group
// has delivered no more than g has, so that from here on it delivers
// exactly what g would have: each watch continues after g's revision.
// It reports whether g is now done.
func (g *group) merge() bool {
	h := g.h
	h.mu.Lock()
	b := h.groups[g.share]
	h.mu.Unlock()
	if b == nil || b == g {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done || !g.created || (g.req.IncludeInitialSnapshot && !g.snapDone) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || !b.created || b.rev > g.rev || b.next() > g.rev+1 {
		return false
	}
	for m := range g.members {
		m.start = max(m.start, g.rev+1)
		m.g.Store(b)
		b.members[m] = struct{}{}
	}
	// Progress asked of g: every event <= g.rev has been delivered.
	for _, m := range g.progress {
		if !m.gone {
			m.ls.enqueue(&dkvpb.WatchResponse{Header: g.headerAtLocked(g.rev), WatchId: m.id})
		}
	}
	g.progress = nil
	clear(g.members)
	g.done = true
	g.cancel()
	h.p.metrics.merges.Inc()
	return true
}

// handle broadcasts one upstream response; false ends the group.
func (g *group) handle(resp *dkvpb.WatchResponse) bool {
	if resp.Canceled {
		g.mu.Lock()
		if resp.Header == nil {
			resp.Header = g.headerAtLocked(g.rev)
		}
		g.mu.Unlock()
		g.end(func(m *member) {
			r := withID(resp, m.id)
			r.Created = !m.created
			m.ls.enqueue(r)
		})
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if resp.Header != nil {
		g.header = resp.Header
	}
	rev := resp.GetHeader().GetRevision()
	switch {
	case resp.Created:
		if !g.created { // a resumed watch's created response says nothing new
			g.created, g.rev = true, rev
			for m := range g.members {
				if !m.created {
					g.sendCreatedLocked(m)
				}
			}
		}
	case len(resp.Snapshot) > 0 || resp.SnapshotEnd:
		for m := range g.members {
			m.ls.enqueue(withID(resp, m.id))
		}
		g.snapDone = resp.SnapshotEnd
	case resp.Fragment:
		g.frag = append(g.frag, resp)
	case len(resp.Events) > 0:
		pieces := append(g.frag, resp)
		g.frag = nil
		// etcd's form of each piece, made once for all etcd streams.
		var etcd []*etcdserverpb.WatchResponse
		for m := range g.members {
			for k, r := range pieces {
				i := m.firstEvent(r)
				switch {
				case i == len(r.Events):
				case m.ls.etcd:
					if etcd == nil {
						etcd = make([]*etcdserverpb.WatchResponse, len(pieces))
					}
					if etcd[k] == nil {
						etcd[k] = toEtcdWatchResponse(r)
					}
					m.ls.push(etcdEventsFor(etcd[k], m.id, i))
				default:
					out := withID(r, m.id)
					out.Events = r.Events[i:]
					m.ls.push(out)
				}
			}
		}
		g.rev = max(g.rev, rev)
	default: // progress: every event <= rev has been sent
		g.rev = max(g.rev, rev)
		var asked *member
		if len(g.progress) > 0 {
			asked, g.progress = g.progress[0], g.progress[1:]
		}
		for m := range g.members {
			if g.req.ProgressNotify || m == asked {
				m.ls.enqueue(withID(resp, m.id))
			}
		}
	}
	return true
}

// firstEvent is the index of r's first event from m's start revision on
// (len(r.Events) if none is).
func (m *member) firstEvent(r *dkvpb.WatchResponse) int {
	evs := r.Events
	i := 0
	for i < len(evs) && evs[i].GetKv().GetModRevision() < m.start {
		i++
	}
	return i
}

// withID is a shallow copy of r for local watch id; the messages it
// points to are shared and never changed.
func withID(r *dkvpb.WatchResponse, id int64) *dkvpb.WatchResponse {
	return &dkvpb.WatchResponse{
		Header: r.Header, WatchId: id, Created: r.Created, Canceled: r.Canceled,
		CancelStatus: r.CancelStatus, CancelReason: r.CancelReason, CompactRevision: r.CompactRevision,
		Fragment: r.Fragment, Snapshot: r.Snapshot, SnapshotEnd: r.SnapshotEnd, Events: r.Events,
	}
}
