package proxy

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The read cache answers serializable reads of the current revision
// (DKV's KV.Range and etcd's KV.Range) from responses it has seen.
//
// Invariants:
//
//   - An entry is found only by the exact request bytes, method and
//     caller identity (the metadata, as for watch sharing) it was stored
//     under, so a token is only ever answered with what that token read.
//   - Each identity with entries holds one upstream watch over its whole
//     keyspace, with its own metadata. An entry is stored only if its
//     revision is no older than what that watch has delivered, and is
//     dropped by the first event on a key in its range; so while the
//     watch runs, an entry is the state of its range at max(its
//     revision, the watch's revision), and is answered with that revision.
//   - When the watch fails (or is refused) every entry of the identity
//     is dropped, and nothing is stored until a new watch is created.
//   - An identity whose keyspace watch is refused with PermissionDenied
//     (it may read only some ranges) is cached range by range instead
//     (cache_ranged.go): each entry is kept current by an upstream watch
//     of its own range, with the identity's metadata, from just after
//     the revision it was read at; it is answered only once the member
//     has created that watch, at max(its revision, what that watch has
//     delivered), and the watch is cancelled with the range's last
//     entry. The rules above hold with "the watch" read as the entry's.
//   - Revisions never go backwards for an identity: the proxy remembers
//     the highest revision any KV response it relayed to that identity
//     carried (a write's, a read's), and answers from the cache only at a
//     revision at least that high; below it the read goes upstream, and a
//     serializable answer older than it is asked again as linearizable.

const (
	// entryOverhead is what an entry costs beyond its key and response.
	entryOverhead = 256
	// idleAfter is how long an identity with no entries keeps its watch.
	idleAfter = time.Minute
	// refusedFor is how long an identity whose watch was refused (for
	// another reason than PermissionDenied, or its range watches' stream
	// was) is served without the cache.
	refusedFor = 30 * time.Second
)

var (
	dkvRange  = dkvpb.KV_Range_FullMethodName
	etcdRange = etcdserverpb.KV_Range_FullMethodName
)

// revisioned are the unary methods whose responses carry a header (field
// 1) with the store's revision (field 3) that the client sees.
var revisioned = map[string]bool{
	dkvpb.KV_Range_FullMethodName: true, dkvpb.KV_Put_FullMethodName: true,
	dkvpb.KV_DeleteRange_FullMethodName: true, dkvpb.KV_Txn_FullMethodName: true,
	dkvpb.KV_Counter_FullMethodName: true, dkvpb.Lease_Revoke_FullMethodName: true,
	etcdserverpb.KV_Range_FullMethodName: true, etcdserverpb.KV_Put_FullMethodName: true,
	etcdserverpb.KV_DeleteRange_FullMethodName: true, etcdserverpb.KV_Txn_FullMethodName: true,
	etcdserverpb.Lease_LeaseRevoke_FullMethodName: true,
}

// keyRange is the keys a read covers: one key, or [start, end) where
// end "\x00" means every key >= start.
type keyRange struct {
	start, end string
	single     bool
}

func (r keyRange) contains(k string) bool {
	switch {
	case r.single:
		return k == r.start
	case r.end == "\x00":
		return k >= r.start
	}
	return k >= r.start && k < r.end
}

// prefixEnd is the end of the range of keys starting with p.
func prefixEnd(p []byte) string {
	end := []byte(string(p))
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return string(end[:i+1])
		}
	}
	return "\x00"
}

// rangeRead is a decoded Range request.
type rangeRead struct {
	r         keyRange
	cacheable bool // serializable, at the current revision
	// linearizable is the same request without serializable.
	linearizable func() ([]byte, error)
}

// parseRange decodes a Range request of method; false if it is none the
// cache understands (the call is then relayed as it is).
func parseRange(method string, b []byte) (rangeRead, bool) {
	r := func(key, end []byte) keyRange {
		if len(end) == 0 {
			return keyRange{start: string(key), single: true}
		}
		return keyRange{start: string(key), end: string(end)}
	}
	switch method {
	case dkvRange:
		var req dkvpb.RangeRequest
		if proto.Unmarshal(b, &req) != nil {
			return rangeRead{}, false
		}
		kr := r(req.Key, req.RangeEnd)
		if req.Prefix {
			kr = keyRange{start: string(req.Key), end: prefixEnd(req.Key)}
		}
		return rangeRead{r: kr, cacheable: req.Serializable && req.Revision == 0 && req.Lock == nil,
			linearizable: func() ([]byte, error) { req.Serializable = false; return proto.Marshal(&req) }}, true
	case etcdRange:
		var req etcdserverpb.RangeRequest
		if proto.Unmarshal(b, &req) != nil {
			return rangeRead{}, false
		}
		return rangeRead{r: r(req.Key, req.RangeEnd), cacheable: req.Serializable && req.Revision == 0,
			linearizable: func() ([]byte, error) { req.Serializable = false; return proto.Marshal(&req) }}, true
	}
	return rangeRead{}, false
}

// fields calls f with each field of message b (the whole field and its
// value) until f returns false. It reports whether b is well formed up
// to there.
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, field, value []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return false
		}
		if !f(num, typ, b[:n+m], b[n:n+m]) {
			return true
		}
		b = b[n+m:]
	}
	return true
}

// header is the header (field 1) of response b, and whether b has one.
func header(num protowire.Number, typ protowire.Type, value []byte) ([]byte, bool) {
	if num != 1 || typ != protowire.BytesType {
		return nil, false
	}
	h, _ := protowire.ConsumeBytes(value) // well formed: fields checked it
	return h, true
}

// headerRevision is the revision in a response's header (field 1, its
// field 3), 0 if it has none.
func headerRevision(b []byte) int64 {
	var rev int64
	fields(b, func(num protowire.Number, typ protowire.Type, _, value []byte) bool {
		h, ok := header(num, typ, value)
		if !ok {
			return true
		}
		fields(h, func(num protowire.Number, typ protowire.Type, _, value []byte) bool {
			if num == 3 && typ == protowire.VarintType {
				v, _ := protowire.ConsumeVarint(value)
				rev = int64(v)
			}
			return true
		})
		return false
	})
	return rev
}

// withHeaderRevision is response b with its header's revision set to
// rev; nil if b is malformed.
func withHeaderRevision(b []byte, rev int64) []byte {
	out := make([]byte, 0, len(b)+12)
	ok := fields(b, func(num protowire.Number, typ protowire.Type, field, value []byte) bool {
		h, isHeader := header(num, typ, value)
		if !isHeader {
			out = append(out, field...)
			return true
		}
		var nh []byte
		hok := fields(h, func(num protowire.Number, _ protowire.Type, field, _ []byte) bool {
			if num != 3 {
				nh = append(nh, field...)
			}
			return true
		})
		nh = protowire.AppendTag(nh, 3, protowire.VarintType)
		nh = protowire.AppendVarint(nh, uint64(rev))
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, nh)
		return hok
	})
	if !ok {
		return nil
	}
	return out
}

// readCache is the proxy's cache of serializable reads.
type readCache struct {
	p   *Proxy
	max int64

	mu        sync.Mutex
	entries   map[string]*entry
	lru       *list.List // of *entry, most recently used first
	bytes     int64
	idents    map[string]*identCache
	lastSweep time.Time
}

// identCache is the cache's state for one identity: its watch and the
// revisions it has been answered at.
type identCache struct {
	c      *readCache
	md     metadata.MD
	ident  string
	cancel context.CancelFunc

	// Under c.mu:
	synced  bool  // the watch is created and running
	rev     int64 // every event <= rev has dropped the entries it touches
	floor   int64 // the highest revision relayed to the identity
	refused time.Time
	lastUse time.Time
	asking  bool // a progress request is out
	single  map[string]map[*entry]struct{}
	ranges  map[*entry]struct{}
	n       int // entries
	// ranged: the keyspace watch was refused with PermissionDenied; the
	// identity's entries are kept current by range watches.
	ranged bool
	rw     rangeWatches // when ranged

	sendMu sync.Mutex
	up     dkvpb.Watch_WatchClient
}

type entry struct {
	key   string
	owner *identCache
	r     keyRange
	rev   int64
	resp  []byte
	size  int64
	elem  *list.Element
	// w is the watch that keeps the entry current when its owner is
	// ranged; nil when the owner's keyspace watch does.
	w *rangeWatch
	// The response last answered, at servedRev.
	servedRev int64
	served    []byte
}

func newReadCache(p *Proxy, max int64) *readCache {
	return &readCache{p: p, max: max, entries: map[string]*entry{}, lru: list.New(), idents: map[string]*identCache{}}
}

// cacheIdentity is the identity the cache keys md by: all of it but the
// exactly-once session, which is per call and grants nothing, so that a
// client's writes (which carry one) and its reads (which do not) count
// as the same caller's.
func cacheIdentity(md metadata.MD) string {
	if len(md.Get(dkvpb.SessionMetadata)) == 0 {
		return identity(md)
	}
	md = md.Copy()
	delete(md, dkvpb.SessionMetadata)
	return identity(md)
}

func cacheKey(ident, method string, req []byte) string {
	return ident + "\x00" + method + "\x00" + string(req)
}

func (c *readCache) size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// get is the cached answer to req from ident, or nil.
func (c *readCache) get(ident, method string, req []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[cacheKey(ident, method, req)]
	if e == nil {
		return nil
	}
	var rev int64
	switch {
	case e.w != nil && e.w.synced:
		rev = max(e.rev, e.w.rev)
	case e.w == nil && e.owner.synced:
		rev = max(e.rev, e.owner.rev)
	default:
		return nil
	}
	if s := c.idents[ident]; s != nil && rev < s.floor {
		// The identity has seen a newer revision than the watch has
		// reached: an answer from here could be older than what it saw.
		e.owner.askProgressLocked()
		return nil
	}
	c.lru.MoveToFront(e.elem)
	e.owner.lastUse = time.Now()
	if e.servedRev != rev {
		b := withHeaderRevision(e.resp, rev)
		if b == nil {
			return nil
		}
		e.servedRev, e.served = rev, b
	}
	return e.served
}

// saw records that a response at rev was relayed to ident.
func (c *readCache) saw(ident string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.idents[ident]; s != nil {
		s.floor = max(s.floor, rev)
	}
}

// floor is the highest revision relayed to ident that the cache knows.
func (c *readCache) floor(ident string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.idents[ident]; s != nil {
		return s.floor
	}
	return 0
}

// use makes sure ident has a state (and a watch), unless its watch was
// refused lately.
func (c *readCache) use(ident string, md metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.lastSweep) > idleAfter/4 {
		c.lastSweep = now
		c.sweepLocked(now)
	}
	s := c.idents[ident]
	if s != nil {
		s.lastUse = now
		return
	}
	md = md.Copy()
	delete(md, dkvpb.SessionMetadata)
	s = &identCache{c: c, md: md, ident: ident, lastUse: now, single: map[string]map[*entry]struct{}{}, ranges: map[*entry]struct{}{}}
	ctx, cancel := context.WithCancel(c.p.ctx)
	s.cancel = cancel
	c.idents[ident] = s
	c.p.wg.Add(1)
	go s.run(ctx)
}

// sweepLocked ends the watches of identities that have no entries and
// have not read for a while, and forgets refusals that have run out.
func (c *readCache) sweepLocked(now time.Time) {
	for id, s := range c.idents {
		if (s.n == 0 && now.Sub(s.lastUse) > idleAfter) || (!s.refused.IsZero() && now.After(s.refused)) {
			c.dropLocked(s)
			delete(c.idents, id)
			s.cancel()
		}
	}
}

// put stores resp, ident's answer to req at rev, if the identity's watch
// has not delivered past rev (else an event it already handled could be
// newer than the answer).
func (c *readCache) put(ident, method string, req []byte, r keyRange, rev int64, resp []byte) {
	key := cacheKey(ident, method, req)
	size := int64(len(key)+len(resp)) + entryOverhead
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.idents[ident]
	if s == nil || size > c.max {
		return
	}
	var w *rangeWatch
	if s.ranged {
		if w = s.rw.watchLocked(r, rev); w == nil {
			return
		}
	} else if !s.synced || rev < s.rev {
		return
	}
	e := &entry{key: key, owner: s, r: r, rev: rev, resp: resp, size: size, w: w, servedRev: rev, served: resp}
	if w != nil {
		// Before the old entry goes: the range's watch stays.
		w.entries[e] = struct{}{}
	}
	if old := c.entries[key]; old != nil {
		c.removeLocked(old)
	}
	e.elem = c.lru.PushFront(e)
	c.entries[key] = e
	c.bytes += size
	s.n++
	if r.single {
		m := s.single[r.start]
		if m == nil {
			m = map[*entry]struct{}{}
			s.single[r.start] = m
		}
		m[e] = struct{}{}
	} else {
		s.ranges[e] = struct{}{}
	}
	for c.bytes > c.max {
		c.removeLocked(c.lru.Back().Value.(*entry))
	}
}

func (c *readCache) removeLocked(e *entry) {
	if c.entries[e.key] != e {
		return
	}
	delete(c.entries, e.key)
	c.lru.Remove(e.elem)
	c.bytes -= e.size
	s := e.owner
	s.n--
	if e.r.single {
		if m := s.single[e.r.start]; m != nil {
			delete(m, e)
			if len(m) == 0 {
				delete(s.single, e.r.start)
			}
		}
	} else {
		delete(s.ranges, e)
	}
	if e.w != nil {
		s.rw.releaseLocked(e)
	}
}

// dropLocked removes every entry of s.
func (c *readCache) dropLocked(s *identCache) {
	for _, m := range s.single {
		for e := range m {
			c.removeLocked(e)
		}
	}
	for e := range s.ranges {
		c.removeLocked(e)
	}
}

// invalidateLocked removes s's entries whose range holds key.
func (s *identCache) invalidateLocked(key string) {
	for e := range s.single[key] {
		s.c.removeLocked(e)
	}
	for e := range s.ranges {
		if e.r.contains(key) {
			s.c.removeLocked(e)
		}
	}
}

// askProgressLocked asks the watch for its progress, so that it reaches
// a revision the identity saw even when no event in the keyspace follows
// it.
func (s *identCache) askProgressLocked() {
	if s.ranged && !s.asking {
		s.asking = true
		s.rw.queueLocked(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_ProgressRequest{ProgressRequest: &dkvpb.WatchProgressRequest{}}})
		return
	}
	if s.asking || !s.synced {
		return
	}
	s.asking = true
	go func() {
		s.sendMu.Lock()
		defer s.sendMu.Unlock()
		if s.up != nil {
			s.up.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_ProgressRequest{ProgressRequest: &dkvpb.WatchProgressRequest{}}})
		}
	}()
}

var (
	errRefused = errors.New("the upstream refused the cache's watch")
	// errDenied: refused with PermissionDenied, the caller may not read
	// the whole keyspace.
	errDenied = fmt.Errorf("%w: permission denied", errRefused)
)

// run keeps the identity's watch open until its state is dropped. Each
// failure drops every entry; the next watch starts from the present.
func (s *identCache) run(ctx context.Context) {
	c := s.c
	defer c.p.wg.Done()
	var b backoff
	for {
		created, err := s.stream(ctx)
		c.mu.Lock()
		s.synced, s.asking = false, false
		c.dropLocked(s)
		if ctx.Err() == nil && !created && (errors.Is(err, errDenied) || status.Code(err) == codes.PermissionDenied) {
			// It may read some ranges: watch those it reads.
			s.ranged = true
			s.rw.init()
			c.mu.Unlock()
			c.p.log.Info("read cache watches ranges for an identity that may not watch the whole keyspace", "err", err)
			s.runRanged(ctx)
			return
		}
		refused := ctx.Err() == nil && (errors.Is(err, errRefused) || !retryable(err))
		if refused {
			s.refused = time.Now().Add(refusedFor)
		}
		c.mu.Unlock()
		if ctx.Err() != nil || refused {
			if refused {
				c.p.log.Info("read cache off for an identity whose keyspace watch was refused", "err", err)
			}
			return
		}
		if created {
			b.reset()
		}
		if !sleep(ctx, b.next()) {
			return
		}
	}
}

// stream runs one upstream watch over the whole keyspace; it reports
// whether it was created.
func (s *identCache) stream(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, s.md))
	defer cancel()
	up, err := dkvpb.NewWatchClient(s.c.p.conn).Watch(ctx)
	if err != nil {
		return false, err
	}
	s.sendMu.Lock()
	err = up.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{
		Key: []byte{0}, RangeEnd: []byte{0}, WatchId: 1}}})
	if err == nil {
		s.up = up
	}
	s.sendMu.Unlock()
	defer func() {
		s.sendMu.Lock()
		s.up = nil
		s.sendMu.Unlock()
	}()
	created := false
	for {
		resp, err := up.Recv()
		if err != nil {
			return created, err
		}
		if resp.Canceled {
			if created || resp.CancelStatus == dkverr.Unavailable.Reason() {
				return created, status.Error(codes.Unavailable, resp.CancelReason)
			}
			if resp.CancelStatus == dkverr.PermissionDenied.Reason() {
				return false, fmt.Errorf("%w: %s", errDenied, resp.CancelReason)
			}
			return false, errRefused
		}
		rev := resp.GetHeader().GetRevision()
		c := s.c
		c.mu.Lock()
		switch {
		case resp.Created:
			created, s.synced, s.rev = true, true, rev
		case len(resp.Events) > 0:
			for _, ev := range resp.Events {
				s.invalidateLocked(string(ev.GetKv().GetKey()))
			}
			if !resp.Fragment {
				s.rev = max(s.rev, rev)
			}
		default: // progress: every event <= rev has been delivered
			s.rev = max(s.rev, rev)
			s.asking = false
		}
		c.mu.Unlock()
	}
}

// rangeCall answers a Range call: from the cache when it may, else from
// the cluster, storing the answer when it is cacheable.
func (p *Proxy) rangeCall(ss grpc.ServerStream, method string) error {
	req := new(frame)
	if err := ss.RecvMsg(req); err != nil {
		return err
	}
	md := passMD(ss.Context())
	ident := cacheIdentity(md)
	c := p.cache
	rr, ok := parseRange(method, req.b)
	cacheable := ok && rr.cacheable
	if cacheable {
		if b := c.get(ident, method, req.b); b != nil {
			p.metrics.cacheHits.Inc()
			return ss.SendMsg(&frame{b: b})
		}
		p.metrics.cacheMisses.Inc()
		c.use(ident, md)
	}
	ctx := metadata.NewOutgoingContext(ss.Context(), md)
	var header, trailer metadata.MD
	resp := new(frame)
	err := p.conn.Invoke(ctx, method, req, resp, grpc.ForceCodec(codec{}), grpc.Header(&header), grpc.Trailer(&trailer))
	rev := headerRevision(resp.b)
	if err == nil && ok && rr.cacheable && rev < c.floor(ident) {
		// A member behind what this identity saw through the proxy.
		lin, lerr := rr.linearizable()
		if lerr != nil {
			return status.Errorf(codes.Internal, "proxy: encoding a read: %v", lerr)
		}
		header, trailer, resp = nil, nil, new(frame)
		err = p.conn.Invoke(ctx, method, &frame{b: lin}, resp, grpc.ForceCodec(codec{}), grpc.Header(&header), grpc.Trailer(&trailer))
		rev, cacheable = headerRevision(resp.b), false
	}
	if len(header) > 0 {
		if err := ss.SendHeader(header); err != nil {
			return err
		}
	}
	ss.SetTrailer(trailer)
	if err != nil {
		return err
	}
	c.saw(ident, rev)
	if cacheable {
		c.put(ident, method, req.b, rr.r, rev, resp.b)
	}
	return ss.SendMsg(resp)
}
