package mvcc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/lock"
	"google.golang.org/protobuf/proto"
)

// EventType says what happened to a key.
type EventType int

const (
	EventPut EventType = iota
	EventDelete
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one key change made by an applied command, for the watch hub.
// For a delete, KV holds the key and ModRevision = the delete's revision.
// PrevKV is the key's previous version, nil if it did not exist.
type Event struct {
	Type   EventType
	KV     *dkvpb.KeyValue
	PrevKV *dkvpb.KeyValue
}

// Changes are the side effects of one command, beyond its writes to the
// batch, in the order they were made.
type Changes struct {
	// Events are the key changes, for the watch hub.
	Events []Event
	// Leases are the lease changes (grants, renewals, checkpoints,
	// revocations), for the server's lease table.
	Leases []lease.Change
	// Locks are the lock grants (to the acquirer or to a waiter on a
	// release), for the server to wake the waiters they went to.
	Locks []*LockGrant
}

// Store is the MVCC state machine. Apply, Reload and PurgeHistory's
// callers own the write side; Range, HashKV, Revision and CompactRevision
// may be called from any goroutine.
type Store struct {
	limits  Limits
	rev     atomic.Int64 // as of the last Apply, which may not be committed yet
	compact atomic.Int64
	// layout is the keyspace layout (layout.go) of the state being
	// applied: written by the apply goroutine (UpgradeLayout, Reload).
	layout atomic.Int32
	// revs are the newest revisions of recently written keys
	// (revcache.go), for reads at the current revision.
	revs *revCache
	// latest is the apply goroutine's own memory of recently written
	// keys' newest versions (latest.go), for the writes that replace them.
	latest latestCache

	// What the database holds, for reads of the live database without
	// reading the counters from Pebble each time: the revision and compact
	// revision of the last committed batch, and a sequence lock, odd while
	// a batch is being committed (BeginCommit .. EndCommit). A read that
	// sees the same even gen before and after reading the data read
	// exactly the state of committedRev (RangeLatest).
	gen           atomic.Uint64
	committedRev  atomic.Int64
	committedComp atomic.Int64

	// held is the set of keys whose lock has a holder, exactly as the
	// lock table records them in the state being applied: written by the
	// apply goroutine (grantLock, releaseLock) and rebuilt from the table
	// by Reload. A write to a key outside it needs no lock-table lookup,
	// which is the common case of a put. Applying the same commands again
	// from the same state gives the same set, as Pebble's state does.
	held map[string]struct{}
	// leaseRecs are the lease records, exactly as the lease table holds
	// them in the state being applied, kept the same way as held (Writer's
	// setLease and deleteLease, rebuilt by Reload): a keep-alive batch,
	// a checkpoint or a put with a lease reads them without a Pebble
	// lookup. A map by id: the same commands applied again from the same
	// state leave it the same.
	leaseRecs map[int64]lease.Record
	// obs, when set, is told of the keyspace changes (SetObserver).
	obs WriteObserver
	// quota, when set, admits or refuses each put (SetQuota).
	quota Quota
	// indexes are the declared label indexes, by id, exactly as s/mx
	// holds them in the state being applied (IndexCreate and IndexDrop
	// change both; Reload rebuilds it), so a write finds the indexes
	// covering its key without a Pebble read. A slice replaced, never
	// modified, so readers may hold an old one.
	indexes []IndexDef

	// Scratch buffers, used by the apply goroutine only. Pebble copies keys
	// and values on Set, so they can be reused across writes.
	kbuf, vbuf, ckbuf []byte
	// w is the Writer of the command being applied, reused so that Begin
	// allocates nothing; its changes slice is reused too.
	w Writer
}

// Open reads the persisted revision and compact revision.
func Open(r pebble.Reader, l Limits) (*Store, error) {
	l.EnsureDefaults()
	s := &Store{limits: l, revs: newRevCache()}
	if err := s.Reload(r); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload re-reads the revision counters, the set of locked keys and the
// lease records from r
// (after a snapshot is installed underneath).
func (s *Store) Reload(r pebble.Reader) error {
	rev, comp, err := readCounters(r)
	if err != nil {
		return err
	}
	held := map[string]struct{}{}
	if err := lock.HeldKeys(r, func(k []byte) { held[string(k)] = struct{}{} }); err != nil {
		return err
	}
	recs := map[int64]lease.Record{}
	if err := lease.List(r, func(rec lease.Record) bool { recs[rec.ID] = rec; return true }); err != nil {
		return err
	}
	idx, err := readIndexes(r)
	if err != nil {
		return err
	}
	layout, err := readLayout(r)
	if err != nil {
		return err
	}
	s.held, s.leaseRecs, s.indexes = held, recs, idx
	s.layout.Store(int32(layout))
	s.revs.reset()
	s.latest.reset()
	if s.obs != nil {
		s.obs.Reloaded()
	}
	s.rev.Store(rev)
	s.compact.Store(comp)
	s.committedRev.Store(rev)
	s.committedComp.Store(comp)
	if s.gen.Load()%2 == 1 {
		s.gen.Add(1) // a snapshot install (Committing .. Restored) ends here
	}
	return nil
}

// BeginCommit is called by the apply goroutine just before the batch of
// the Applies since the last EndCommit is committed to the database.
func (s *Store) BeginCommit() {
	if s.gen.Load()%2 == 0 {
		s.gen.Add(1)
	}
}

// EndCommit is called once that batch is committed.
func (s *Store) EndCommit() {
	s.committedRev.Store(s.rev.Load())
	s.committedComp.Store(s.compact.Load())
	if s.gen.Load()%2 == 1 {
		s.gen.Add(1)
	}
}

// Limits returns the limits the store was opened with.
func (s *Store) Limits() Limits { return s.limits }

// Revision is the store revision as of the last Apply.
func (s *Store) Revision() int64 { return s.rev.Load() }

// CompactRevision is the compact revision as of the last Apply.
func (s *Store) CompactRevision() int64 { return s.compact.Load() }

// FirstRevision is the revision of an empty store, as in etcd: the
// first write is revision FirstRevision+1. A store with no revision
// recorded (nothing ever written) reads as FirstRevision; a recorded
// revision is kept as it is.
const FirstRevision = 1

func readCounters(r pebble.Reader) (rev, comp int64, err error) {
	if rev, err = readInt(r, keyRevision); err != nil {
		return 0, 0, err
	}
	if rev == 0 {
		rev = FirstRevision
	}
	if comp, err = readInt(r, keyCompact); err != nil {
		return 0, 0, err
	}
	return rev, comp, nil
}

func readInt(r pebble.Reader, k []byte) (int64, error) {
	v, c, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("mvcc: %s is %d bytes, want 8", k, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// getLatest reads the current record of key through r: its newest
// version, unless that is a tombstone. The value is copied.
// revs, if not nil, may know the revision of that version.
func getLatest(r pebble.Reader, revs *revCache, kbuf, key []byte) (rec record, ok bool, err error) {
	err = getLatestVersion(r, revs, key, kbuf, func(_ []byte, v *record) bool {
		rec, ok = *v, true
		return false
	})
	if !ok || err != nil {
		return record{}, false, err
	}
	rec.value = append([]byte(nil), rec.value...)
	rec.labels = append([]byte(nil), rec.labels...)
	return rec, true, nil
}

func (r *record) kv(key []byte) *dkvpb.KeyValue {
	return &dkvpb.KeyValue{
		Key: key, Value: r.value,
		CreateRevision: r.create, ModRevision: r.mod, Version: r.version, Lease: r.lease,
		Labels: decodeLabels(r.labels),
	}
}

func must(err error) {
	if err != nil {
		panic(fmt.Sprintf("mvcc: storage failure during apply: %v", err))
	}
}

// Writer applies one committed command into an indexed batch: reads go
// through the batch, so they see earlier commands applied into it. Its
// command methods (Put, Txn, LeaseGrant, ...) check the command against
// the state and refuse it with a *dkverr.Error, writing nothing, or write
// it; Finish then records the revision. One Writer serves one command;
// package state picks the method. The methods panic on storage errors,
// since a node that cannot apply must stop rather than diverge.
//
// All the command's writes happen at revision rev, which becomes the
// store's revision only if something was written.
type Writer struct {
	s       *Store
	b       *pebble.Batch
	cur     int64 // revision before the command
	comp    int64
	rev     int64 // revision of the command's writes
	now     int64 // the raft entry's time in Unix ns (SetTime); 0 if none
	user    string
	isRoot  func(user string) bool // nil: leases are unrestricted (SetCaller)
	changes []change
	events  []Event
	leases  []lease.Change
	locks   []*LockGrant
}

// Begin starts applying one command into b.
// The Writer is valid until the next Begin.
func (s *Store) Begin(b *pebble.Batch) *Writer {
	cur := s.rev.Load()
	s.w = Writer{s: s, b: b, cur: cur, comp: s.compact.Load(), rev: cur + 1, changes: s.w.changes[:0]}
	return &s.w
}

// SetTime gives the command the time its proposer stamped into the raft
// entry (InternalRequest.time_unix_nano; 0 when it stamped none). It is
// replicated, never this member's clock: a lock grant records it.
func (w *Writer) SetTime(unixNano int64) { w.now = unixNano }

// SetCaller names who made the command, for lease ownership: user is the
// authenticated user (InternalRequest.user; "" with auth disabled or for a
// member's own command) and isRoot tells whether a user has the root role
// in the replicated auth state. A nil isRoot (auth disabled) leaves every
// lease open to every command, as before leases had owners.
func (w *Writer) SetCaller(user string, isRoot func(user string) bool) {
	w.user, w.isRoot = user, isRoot
}

func (w *Writer) get(key []byte) (record, bool) {
	if rec, live, ok := w.s.latest.get(key); ok {
		return rec, live
	}
	rec, ok, err := getLatest(w.b, w.s.revs, w.s.kbuf[:0], key)
	must(err)
	return rec, ok
}

// Finish writes the change log and the revision if the command changed
// anything, and returns the store revision after the command and the
// command's side effects. Call it only for a command that succeeded.
func (w *Writer) Finish() (int64, Changes) {
	ch := Changes{Events: w.events, Leases: w.leases, Locks: w.locks}
	if len(w.changes) == 0 {
		return w.cur, ch
	}
	s := w.s
	s.vbuf = appendChanges(s.vbuf[:0], w.changes)
	s.ckbuf = appendChangeKey(s.ckbuf[:0], w.rev)
	must(w.b.Set(s.ckbuf, s.vbuf, nil))
	s.vbuf = binary.BigEndian.AppendUint64(s.vbuf[:0], uint64(w.rev))
	must(w.b.Set(keyRevision, s.vbuf, nil))
	s.rev.Store(w.rev)
	return w.rev, ch
}

// Revision is the store revision before the command: what a refused
// command reports.
func (w *Writer) Revision() int64 { return w.cur }

func (w *Writer) writePut(key []byte, rec *record, prev *dkvpb.KeyValue) {
	s := w.s
	if s.layout.Load() < LayoutValueOnce {
		s.kbuf = latestKey(s.kbuf, key)
		s.vbuf = appendLatest(s.vbuf[:0], rec)
		must(w.b.Set(s.kbuf, s.vbuf, nil))
	}
	if s.obs != nil {
		s.obs.Put(w, key)
	}
	s.kbuf = histKey(s.kbuf, key, w.rev)
	s.vbuf = appendHistPut(s.vbuf[:0], rec)
	must(w.b.Set(s.kbuf, s.vbuf, nil))
	s.revs.set(key, w.rev)
	s.latest.put(key, rec)
	w.relink(key, prev.GetLease(), rec.lease)
	w.indexWrite(key, prev, rec.labels)
	w.changes = append(w.changes, change{kind: kindPut, key: key})
	var kv *dkvpb.KeyValue
	if w.events == nil {
		// The common single-key command: its event slice and KeyValue in
		// one allocation.
		one := &oneEvent{}
		kv = &one.kv
		w.events = one.evs[:0]
	} else {
		kv = &dkvpb.KeyValue{}
	}
	kv.Key, kv.Value = key, rec.value
	kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease = rec.create, rec.mod, rec.version, rec.lease
	kv.Labels = decodeLabels(rec.labels)
	w.events = append(w.events, Event{Type: EventPut, KV: kv, PrevKV: prev})
}

// oneEvent holds the event of a single-key command and its KeyValue.
type oneEvent struct {
	evs [1]Event
	kv  dkvpb.KeyValue
}

// tombstoneValue is a history tombstone's value; Pebble copies it.
var tombstoneValue = []byte{kindTombstone}

func (w *Writer) writeDelete(key []byte, prev *dkvpb.KeyValue) {
	s := w.s
	if s.layout.Load() < LayoutValueOnce {
		s.kbuf = latestKey(s.kbuf, key)
		must(w.b.Delete(s.kbuf, nil))
	}
	if s.obs != nil {
		s.obs.Deleted(w, key)
	}
	s.kbuf = histKey(s.kbuf, key, w.rev)
	must(w.b.Set(s.kbuf, tombstoneValue, nil))
	s.revs.set(key, w.rev)
	s.latest.put(key, nil)
	w.relink(key, prev.GetLease(), 0)
	w.indexWrite(key, prev, nil)
	w.changes = append(w.changes, change{kind: kindTombstone, key: key})
	w.events = append(w.events, Event{
		Type:   EventDelete,
		KV:     &dkvpb.KeyValue{Key: key, ModRevision: w.rev},
		PrevKV: prev,
	})
}

func conflict(format string, args ...any) error {
	return dkverr.New(dkverr.Conflict, format, args...)
}

// checkPut checks a put's conditions against the current state.
func (w *Writer) checkPut(p *dkvpb.PutRequest) error {
	if err := w.checkLease(p.Lease); err != nil {
		return err
	}
	if err := w.checkWriteLock(p.Key, p.Lock); err != nil {
		return err
	}
	if err := w.admit(p.Key, p.Value, p.IgnoreValue); err != nil {
		return err
	}
	if !p.IfAbsent && p.IfVersion == 0 && p.IfModRevision == 0 && !p.IgnoreValue && !p.IgnoreLease && !p.IgnoreLabels {
		return nil
	}
	prev, ok := w.get(p.Key)
	return checkPutAgainst(p, prev, ok)
}

func checkPutAgainst(p *dkvpb.PutRequest, prev record, exists bool) error {
	if p.IfAbsent && exists {
		return conflict("key %q already exists (if_absent)", p.Key)
	}
	if p.IfVersion > 0 {
		if !exists {
			return conflict("key %q does not exist (if_version %d)", p.Key, p.IfVersion)
		}
		if prev.version != p.IfVersion {
			return conflict("key %q has version %d, not %d (if_version)", p.Key, prev.version, p.IfVersion)
		}
	}
	if p.IfModRevision > 0 {
		if !exists {
			return conflict("key %q does not exist (if_mod_revision %d)", p.Key, p.IfModRevision)
		}
		if prev.mod != p.IfModRevision {
			return conflict("key %q has mod_revision %d, not %d (if_mod_revision)", p.Key, prev.mod, p.IfModRevision)
		}
	}
	if p.IgnoreValue && !exists {
		return invalid("key %q does not exist; ignore_value needs an existing key", p.Key)
	}
	if p.IgnoreLease && !exists {
		return invalid("key %q does not exist; ignore_lease needs an existing key", p.Key)
	}
	if p.IgnoreLabels && !exists {
		return invalid("key %q does not exist; ignore_labels needs an existing key", p.Key)
	}
	return nil
}

// Put applies a put.
func (w *Writer) Put(p *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
	if err := w.checkPut(p); err != nil {
		return nil, err
	}
	// The response and its header in one allocation; StampRevision fills
	// in the header.
	r := &putReply{}
	r.resp.Header = &r.h
	return w.put(p, &r.resp), nil
}

type putReply struct {
	resp dkvpb.PutResponse
	h    dkvpb.ResponseHeader
}

// put writes p into resp; its conditions have been checked.
func (w *Writer) put(p *dkvpb.PutRequest, resp *dkvpb.PutResponse) *dkvpb.PutResponse {
	prev, exists := w.get(p.Key)
	rec := record{create: w.rev, mod: w.rev, version: 1, lease: p.Lease, value: p.Value, labels: encodeLabels(p.Labels)}
	if p.TtlMs > 0 {
		rec.lease = w.grant(0, p.TtlMs, true)
	}
	var prevKV *dkvpb.KeyValue
	if exists {
		prevKV = prev.kv(p.Key)
		rec.create = prev.create
		rec.version = prev.version + 1
		if p.IgnoreValue {
			rec.value = prev.value
		}
		if p.IgnoreLease {
			rec.lease = prev.lease
		}
		if p.IgnoreLabels {
			rec.labels = prev.labels
		}
	}
	w.writePut(p.Key, &rec, prevKV)
	if p.TtlMs > 0 {
		resp.Lease = rec.lease
	}
	if p.PrevKv {
		resp.PrevKv = prevKV
	}
	return resp
}

func (w *Writer) checkDelete(d *dkvpb.DeleteRangeRequest) error {
	if err := w.checkDeleteLock(d); err != nil {
		return err
	}
	if d.IfVersion == 0 {
		return nil
	}
	prev, ok := w.get(d.Key)
	if !ok {
		return conflict("key %q does not exist (if_version %d)", d.Key, d.IfVersion)
	}
	if prev.version != d.IfVersion {
		return conflict("key %q has version %d, not %d (if_version)", d.Key, prev.version, d.IfVersion)
	}
	return nil
}

// DeleteRange applies a delete.
func (w *Writer) DeleteRange(d *dkvpb.DeleteRangeRequest) (*dkvpb.DeleteRangeResponse, error) {
	if err := w.checkDelete(d); err != nil {
		return nil, err
	}
	return w.deleteRange(d), nil
}

// deleteRange deletes every live key d names; its condition has been
// checked.
func (w *Writer) deleteRange(d *dkvpb.DeleteRangeRequest) *dkvpb.DeleteRangeResponse {
	var prevs []*dkvpb.KeyValue
	// Collect first: an iterator over the batch must not see its own
	// deletes half-way.
	must(scanLatest(w.b, makeSpan(d.Key, d.RangeEnd, d.Prefix), func(key []byte, rec *record) bool {
		r := *rec
		r.value = append([]byte(nil), rec.value...)
		prevs = append(prevs, r.kv(append([]byte(nil), key...)))
		return true
	}))
	for _, p := range prevs {
		w.writeDelete(p.Key, p)
	}
	resp := &dkvpb.DeleteRangeResponse{Deleted: int64(len(prevs))}
	if d.PrevKv {
		resp.PrevKvs = prevs
	}
	return resp
}

// Counter applies a counter update.
func (w *Writer) Counter(c *dkvpb.CounterRequest) (*dkvpb.CounterResponse, error) {
	if err := w.checkLease(c.Lease); err != nil {
		return nil, err
	}
	if err := w.checkWriteLock(c.Key, c.Lock); err != nil {
		return nil, err
	}
	prev, exists := w.get(c.Key)
	var cur int64
	if exists {
		n, err := strconv.ParseInt(string(prev.value), 10, 64)
		if err != nil {
			return nil, invalid("counter key %q holds %q, which is not a 64-bit integer", c.Key, truncate(prev.value, 64))
		}
		cur = n
	}
	if (c.Delta > 0 && cur > math.MaxInt64-c.Delta) || (c.Delta < 0 && cur < math.MinInt64-c.Delta) {
		return nil, invalid("counter %q would overflow: %d + %d is outside the int64 range", c.Key, cur, c.Delta)
	}
	next := cur + c.Delta
	if (c.Min != nil && next < *c.Min) || (c.Max != nil && next > *c.Max) {
		lo, hi := "-inf", "+inf"
		if c.Min != nil {
			lo = strconv.FormatInt(*c.Min, 10)
		}
		if c.Max != nil {
			hi = strconv.FormatInt(*c.Max, 10)
		}
		return nil, conflict("counter %q would become %d, outside [%s,%s]", c.Key, next, lo, hi)
	}
	rec := record{create: w.rev, mod: w.rev, version: 1, lease: c.Lease, value: strconv.AppendInt(nil, next, 10)}
	if err := w.admit(c.Key, rec.value, false); err != nil {
		return nil, err
	}
	var prevKV *dkvpb.KeyValue
	if exists {
		prevKV = prev.kv(c.Key)
		rec.create = prev.create
		rec.version = prev.version + 1
		rec.labels = prev.labels // a counter update keeps the labels
	}
	w.writePut(c.Key, &rec, prevKV)
	return &dkvpb.CounterResponse{Value: next}, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func compactedErr(rev, comp int64) error {
	e := dkverr.New(dkverr.Compacted, "revision %d has been compacted (compact revision %d)", rev, comp)
	e.Metadata = map[string]string{"compact_revision": strconv.FormatInt(comp, 10)}
	return e
}

// Compact applies a compaction: it records the compact revision; the
// history goes later (PurgeHistory).
func (w *Writer) Compact(c *dkvpb.CompactRequest) (*dkvpb.CompactResponse, error) {
	if c.Revision <= w.comp {
		return nil, compactedErr(c.Revision, w.comp)
	}
	if c.Revision > w.cur {
		return nil, invalid("compact revision %d is in the future (current %d)", c.Revision, w.cur)
	}
	w.s.vbuf = binary.BigEndian.AppendUint64(w.s.vbuf[:0], uint64(c.Revision))
	must(w.b.Set(keyCompact, w.s.vbuf, nil))
	w.s.compact.Store(c.Revision)
	return &dkvpb.CompactResponse{}, nil
}

// StampRevision sets the revision header of a command's response, and of
// a txn's op responses (a read at an explicit past revision keeps its
// own). They share one header, which the server completes.
func StampRevision(m proto.Message, rev int64) {
	if r, ok := m.(*dkvpb.PutResponse); ok && r.Header != nil {
		r.Header.Revision = rev // allocated with the response (Writer.Put)
		return
	}
	h := &dkvpb.ResponseHeader{Revision: rev}
	stampRevision(m, h)
}

func stampRevision(m proto.Message, h *dkvpb.ResponseHeader) {
	switch r := m.(type) {
	case *dkvpb.PutResponse:
		r.Header = h
	case *dkvpb.DeleteRangeResponse:
		r.Header = h
	case *dkvpb.TxnResponse:
		r.Header = h
		for _, op := range r.Responses {
			switch o := op.Response.(type) {
			case *dkvpb.ResponseOp_ResponsePut:
				o.ResponsePut.Header = h
			case *dkvpb.ResponseOp_ResponseDeleteRange:
				o.ResponseDeleteRange.Header = h
			case *dkvpb.ResponseOp_ResponseTxn:
				stampRevision(o.ResponseTxn, h)
			case *dkvpb.ResponseOp_ResponseRange:
				// A read at an explicit past revision keeps it.
				if o.ResponseRange.Header == nil {
					o.ResponseRange.Header = h
				}
			}
		}
	case *dkvpb.CounterResponse:
		r.Header = h
	case *dkvpb.QueueClaimResponse:
		r.Header = h
	case *dkvpb.QueueAckResponse:
		r.Header = h
	case *dkvpb.QueueAckBatchResponse:
		r.Header = h
	case *dkvpb.CompactResponse:
		r.Header = h
	case *dkvpb.LeaseGrantResponse:
		r.Header = h
	case *dkvpb.LeaseRevokeResponse:
		r.Header = h
	case *dkvpb.LeaseRenewResponse:
		r.Header = h
	case *dkvpb.LeaseCheckpointResponse:
		r.Header = h
	case *dkvpb.LeaseExpireResponse:
		r.Header = h
	case *dkvpb.LockAcquireResponse:
		r.Header = h
	case *dkvpb.LockReleaseResponse:
		r.Header = h
	case *dkvpb.LockCancelResponse:
		r.Header = h
	case *dkvpb.IndexCreateResponse:
		r.Header = h
	case *dkvpb.IndexDropResponse:
		r.Header = h
	}
}
