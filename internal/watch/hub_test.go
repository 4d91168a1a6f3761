package watch

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/testutil"
	"google.golang.org/protobuf/proto"
)

// env is a store applying commands the way the raft node does: apply into
// an indexed batch, commit, then Publish.
type env struct {
	t  testing.TB
	mu sync.Mutex
	db *pebble.DB
	kv *mvcc.Store
	ap *state.Applier
	h  *Hub
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := mvcc.Open(db, mvcc.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, db: db, kv: kv, ap: state.NewApplier(kv)}
	e.h = New(db, kv.Revision(), cfg)
	t.Cleanup(func() {
		e.h.Close()
		db.Close()
	})
	return e
}

// apply applies reqs as one batch and publishes their events.
func (e *env) apply(reqs ...*dkvpb.InternalRequest) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.db.NewIndexedBatch()
	var revs []Revision
	for _, r := range reqs {
		rev, evs := e.applyOne(b, r)
		if len(evs) > 0 {
			revs = append(revs, Revision{Rev: rev, Events: evs})
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		e.t.Fatal(err)
	}
	b.Close()
	if len(revs) > 0 {
		e.h.Publish(revs[len(revs)-1].Rev, revs)
	}
	return e.kv.Revision()
}

// applyOne applies r through package state's command registry, the one
// dispatch the real machine uses.
func (e *env) applyOne(b *pebble.Batch, r *dkvpb.InternalRequest) (int64, []mvcc.Event) {
	res := e.ap.Apply(b, r)
	if res.Err != nil {
		e.t.Fatalf("apply: %v", res.Err)
	}
	return res.Revision, res.Effects.Events
}

func put(k, v string) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func del(k string, prefix bool) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte(k), Prefix: prefix}}}
}

func txnPuts(kvs ...string) *dkvpb.InternalRequest {
	var ops []*dkvpb.RequestOp
	for i := 0; i+1 < len(kvs); i += 2 {
		ops = append(ops, &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}}})
	}
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: &dkvpb.TxnRequest{Success: ops}}}
}

func compact(rev int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: &dkvpb.CompactRequest{Revision: rev}}}
}

// reader collects the responses of a stream, decoded as a client sees them.
type reader struct {
	st    *Stream
	mu    sync.Mutex
	resps []*dkvpb.WatchResponse
	stop  chan struct{}
	done  chan struct{}
}

func decode(t testing.TB, r *dkvpb.WatchResponse) *dkvpb.WatchResponse {
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	out := &dkvpb.WatchResponse{}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// startReader drains st in the background.
func startReader(t testing.TB, st *Stream) *reader {
	rd := &reader{st: st, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		for {
			select {
			case <-rd.stop:
				return
			case <-st.Ready():
			}
			for rs := st.Pop(); rs != nil; rs = st.Pop() {
				rd.mu.Lock()
				for _, r := range rs {
					rd.resps = append(rd.resps, decode(t, r))
				}
				rd.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-rd.stop:
		default:
			close(rd.stop)
		}
		<-rd.done
	})
	return rd
}

func (rd *reader) snapshot() []*dkvpb.WatchResponse {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return append([]*dkvpb.WatchResponse(nil), rd.resps...)
}

// ev is an event in compact, comparable form.
type ev struct {
	rev  int64
	typ  string
	key  string
	val  string
	prev string
}

func (e ev) String() string {
	return fmt.Sprintf("%d:%s %s=%s (prev %s)", e.rev, e.typ, e.key, e.val, e.prev)
}

func toEv(e *dkvpb.Event) ev {
	x := ev{rev: e.Kv.ModRevision, typ: e.Type.String(), key: string(e.Kv.Key), val: string(e.Kv.Value)}
	if e.PrevKv != nil {
		x.prev = string(e.PrevKv.Value)
	}
	return x
}

// events flattens the event responses of watch id, checking that
// fragments are followed by the rest of their revision and that no
// revision is split across non-fragment responses.
func events(t testing.TB, resps []*dkvpb.WatchResponse, id int64) []ev {
	t.Helper()
	var out []ev
	var lastRev int64
	fragmented := false
	for _, r := range resps {
		if r.WatchId != id || len(r.Events) == 0 {
			continue
		}
		first := r.Events[0].Kv.ModRevision
		if first == lastRev && !fragmented {
			t.Fatalf("revision %d split over responses without fragment", first)
		}
		for _, e := range r.Events {
			out = append(out, toEv(e))
		}
		lastRev = r.Events[len(r.Events)-1].Kv.ModRevision
		fragmented = r.Fragment
		if r.Header.Revision != lastRev {
			t.Fatalf("response header revision %d, last event %d", r.Header.Revision, lastRev)
		}
	}
	return out
}

// history is the reference: the events of [from, to] matching fn, read
// straight from the change log.
func (e *env) history(from, to int64, match func([]byte) bool, prev bool) []ev {
	var out []ev
	err := mvcc.ReadEvents(e.db, from, to, match, prev, func(rev int64, evs []mvcc.Event) bool {
		for _, x := range evs {
			y := ev{rev: rev, typ: "PUT", key: string(x.KV.Key), val: string(x.KV.Value)}
			if x.Type == mvcc.EventDelete {
				y.typ = "DELETE"
			}
			if prev && x.PrevKV != nil {
				y.prev = string(x.PrevKV.Value)
			}
			out = append(out, y)
		}
		return true
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func hasPrefix(p string) func([]byte) bool {
	return func(k []byte) bool { return bytes.HasPrefix(k, []byte(p)) }
}

func equalEvs(t testing.TB, what string, got, want []ev) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d\ngot  %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: event %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestOrderingKeyPrefixRange(t *testing.T) {
	e := newEnv(t, Config{})
	st := e.h.NewStream()
	defer st.Close()
	rd := startReader(t, st)
	key, _ := st.Add(Spec{Key: []byte("a/1")}, 2, nil)
	pre, _ := st.Add(Spec{Key: []byte("a/"), Prefix: true, PrevKV: true}, 2, nil)
	rng, _ := st.Add(Spec{Key: []byte("a/2"), RangeEnd: []byte("b")}, 2, nil)

	e.apply(put("a/1", "x"), put("b", "y"))
	txnRev := e.apply(txnPuts("a/1", "x2", "a/2", "z", "c", "w"))
	e.apply(del("a/", true))
	last := e.apply(put("a/3", "q"))

	testutil.Eventually(t, 10*time.Second, "all events", func() bool {
		rs := rd.snapshot()
		return len(events(t, rs, pre.ID())) == 6 && len(events(t, rs, key.ID())) == 3 && len(events(t, rs, rng.ID())) == 3
	})
	resps := rd.snapshot()
	equalEvs(t, "key", events(t, resps, key.ID()), e.history(1, last, func(k []byte) bool { return string(k) == "a/1" }, false))
	equalEvs(t, "prefix", events(t, resps, pre.ID()), e.history(1, last, hasPrefix("a/"), true))
	equalEvs(t, "range", events(t, resps, rng.ID()), e.history(1, last, func(k []byte) bool { return string(k) >= "a/2" && string(k) < "b" }, false))
	// The txn's two events on the prefix share a response: no response
	// carries one of them without the other.
	for _, r := range resps {
		if r.WatchId != pre.ID() {
			continue
		}
		n := 0
		for _, ev := range r.Events {
			if ev.Kv.ModRevision == txnRev {
				n++
			}
		}
		if n != 0 && n != 2 {
			t.Fatalf("txn events split: %d of 2 at revision %d in %v", n, txnRev, r)
		}
	}
}

func TestFiltersAndFragment(t *testing.T) {
	e := newEnv(t, Config{})
	st := e.h.NewStream()
	defer st.Close()
	rd := startReader(t, st)
	noPuts, _ := st.Add(Spec{Key: []byte("k"), Prefix: true, FilterPuts: true}, 2, nil)
	noDels, _ := st.Add(Spec{Key: []byte("k"), Prefix: true, FilterDeletes: true}, 2, nil)
	frag, _ := st.Add(Spec{Key: []byte("k"), Prefix: true, Fragment: 3}, 2, nil)

	var kvs []string
	for i := 0; i < 10; i++ {
		kvs = append(kvs, fmt.Sprintf("k%02d", i), "v")
	}
	e.apply(txnPuts(kvs...))
	last := e.apply(del("k", true))
	all := e.history(1, last, hasPrefix("k"), false)
	testutil.Eventually(t, 10*time.Second, "fragmented events", func() bool { return len(events(t, rd.snapshot(), frag.ID())) == len(all) })
	resps := rd.snapshot()
	equalEvs(t, "fragment", events(t, resps, frag.ID()), all)
	var sizes []int
	var flags []bool
	for _, r := range resps {
		if r.WatchId == frag.ID() && len(r.Events) > 0 {
			sizes = append(sizes, len(r.Events))
			flags = append(flags, r.Fragment)
		}
	}
	if fmt.Sprint(sizes) != "[3 3 3 1 3 3 3 1]" || fmt.Sprint(flags) != "[true true true false true true true false]" {
		t.Fatalf("fragments %v %v, want 3,3,3,1 per revision with fragment on all but the last", sizes, flags)
	}
	var puts, dels []ev
	for _, x := range all {
		if x.typ == "PUT" {
			puts = append(puts, x)
		} else {
			dels = append(dels, x)
		}
	}
	testutil.Eventually(t, 10*time.Second, "filtered", func() bool {
		rs := rd.snapshot()
		return len(events(t, rs, noPuts.ID())) == len(dels) && len(events(t, rs, noDels.ID())) == len(puts)
	})
	equalEvs(t, "filter puts", events(t, rd.snapshot(), noPuts.ID()), dels)
	equalEvs(t, "filter deletes", events(t, rd.snapshot(), noDels.ID()), puts)
}

func TestStartInThePastThenLive(t *testing.T) {
	e := newEnv(t, Config{CatchUpRevisions: 7})
	for i := 0; i < 50; i++ {
		e.apply(put(fmt.Sprintf("p/%d", i%5), fmt.Sprint(i)))
	}
	st := e.h.NewStream()
	defer st.Close()
	rd := startReader(t, st)
	w, _ := st.Add(Spec{Key: []byte("p/"), Prefix: true, PrevKV: true}, 10, nil)
	var last int64
	for i := 50; i < 80; i++ {
		last = e.apply(put(fmt.Sprintf("p/%d", i%5), fmt.Sprint(i)))
	}
	want := e.history(10, last, hasPrefix("p/"), true)
	testutil.Eventually(t, 10*time.Second, "replay and live", func() bool { return len(events(t, rd.snapshot(), w.ID())) >= len(want) })
	equalEvs(t, "resume", events(t, rd.snapshot(), w.ID()), want)
}

func TestSlowConsumerCatchUpFromHistory(t *testing.T) {
	e := newEnv(t, Config{MaxQueueBytes: 4 << 10, CatchUpRevisions: 16})
	slowSt := e.h.NewStream()
	defer slowSt.Close()
	fastSt := e.h.NewStream()
	defer fastSt.Close()
	fastRd := startReader(t, fastSt)
	slow, _ := slowSt.Add(Spec{Key: []byte("s/"), Prefix: true}, 2, nil)
	fast, _ := fastSt.Add(Spec{Key: []byte("s/"), Prefix: true}, 2, nil)

	val := string(bytes.Repeat([]byte("v"), 200))
	var last int64
	for i := 0; i < 500; i++ {
		last = e.apply(put(fmt.Sprintf("s/%d", i%7), fmt.Sprint(i, val)))
	}
	want := e.history(1, last, hasPrefix("s/"), false)
	// The fast watcher gets everything while the slow one reads nothing.
	testutil.Eventually(t, 10*time.Second, "fast watcher", func() bool { return len(events(t, fastRd.snapshot(), fast.ID())) == len(want) })
	equalEvs(t, "fast", events(t, fastRd.snapshot(), fast.ID()), want)
	e.h.mu.Lock()
	state, queued := slow.state, slow.qBytes
	e.h.mu.Unlock()
	if state != stateUnsynced || queued > 4<<10+1024 {
		t.Fatalf("slow watcher: state %d with %d bytes queued; want catching up within the 4 KiB bound", state, queued)
	}
	slowRd := startReader(t, slowSt)
	testutil.Eventually(t, 10*time.Second, "slow watcher catch-up", func() bool { return len(events(t, slowRd.snapshot(), slow.ID())) == len(want) })
	equalEvs(t, "slow", events(t, slowRd.snapshot(), slow.ID()), want)
	// And it is live again.
	e.apply(put("s/x", "live"))
	testutil.Eventually(t, 10*time.Second, "live after catch-up", func() bool { return len(events(t, slowRd.snapshot(), slow.ID())) == len(want)+1 })
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	if slow.state != stateSynced {
		t.Fatalf("slow watcher state %d after catching up, want synced", slow.state)
	}
	if e.h.Stats().CatchUps == 0 {
		t.Fatal("no catch-up read recorded")
	}
}

func TestSlowConsumerCancelledOnCompaction(t *testing.T) {
	e := newEnv(t, Config{MaxQueueBytes: 2 << 10})
	st := e.h.NewStream()
	defer st.Close()
	w, _ := st.Add(Spec{Key: []byte("c/"), Prefix: true}, 2, nil)
	val := string(bytes.Repeat([]byte("v"), 300))
	var last int64
	for i := 0; i < 200; i++ {
		last = e.apply(put(fmt.Sprintf("c/%d", i%3), val))
	}
	e.apply(compact(last - 10))
	// The next catch-up pass notices the compaction (a new write kicks
	// nothing for an unsynced watcher, so read to make room).
	rd := startReader(t, st)
	testutil.Eventually(t, 10*time.Second, "cancel", func() bool {
		rs := rd.snapshot()
		return len(rs) > 0 && rs[len(rs)-1].Canceled
	})
	rs := rd.snapshot()
	c := rs[len(rs)-1]
	if c.CancelStatus != "COMPACTED" || c.CompactRevision != last-10 || c.WatchId != w.ID() {
		t.Fatalf("cancel response %v, want COMPACTED at %d", c, last-10)
	}
	// What was delivered before the cancel is a gap-free prefix.
	got := events(t, rs, w.ID())
	want := e.history(1, last, hasPrefix("c/"), false)
	if len(got) > len(want) {
		t.Fatalf("got %d events, history has %d", len(got), len(want))
	}
	equalEvs(t, "prefix before cancel", got, want[:len(got)])
	if st.Len() != 0 {
		t.Fatalf("stream still has %d watches", st.Len())
	}
	if e.h.Stats().Watchers != 0 {
		t.Fatalf("hub still counts %d watchers", e.h.Stats().Watchers)
	}
}

// TestSnapshotThenLiveRacingWrites registers watchers the way the server
// does (read the state at R from a Pebble snapshot, then watch from R+1)
// while writers run, and checks that snapshot + events rebuild the final
// state and that events are exactly the history after R.
func TestSnapshotThenLiveRacingWrites(t *testing.T) {
	e := newEnv(t, Config{MaxPendingEvents: 64, MaxQueueBytes: 8 << 10})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(g)))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("r/%d", r.Intn(20))
				if r.Intn(5) == 0 {
					e.apply(del(k, false))
				} else {
					e.apply(put(k, fmt.Sprintf("%d-%d", g, i)))
				}
			}
		}(g)
	}
	type reg struct {
		w    *Watcher
		rd   *reader
		rev  int64
		snap map[string]string
	}
	var regs []reg
	for i := 0; i < 20; i++ {
		time.Sleep(time.Millisecond)
		ps := e.db.NewSnapshot()
		resp, err := e.kv.Range(ps, &dkvpb.RangeRequest{Key: []byte("r/"), Prefix: true})
		ps.Close()
		if err != nil {
			t.Fatal(err)
		}
		st := e.h.NewStream()
		defer st.Close()
		rd := startReader(t, st)
		R := resp.Header.Revision
		w, _ := st.Add(Spec{Key: []byte("r/"), Prefix: true}, R+1, nil)
		snap := map[string]string{}
		for _, kv := range resp.Kvs {
			snap[string(kv.Key)] = string(kv.Value)
		}
		regs = append(regs, reg{w, rd, R, snap})
	}
	close(stop)
	wg.Wait()
	final := e.apply(put("r/end", "end"))
	resp, err := e.kv.Range(e.db, &dkvpb.RangeRequest{Key: []byte("r/"), Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range regs {
		want := e.history(r.rev+1, final, hasPrefix("r/"), false)
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("watcher %d", i), func() bool { return len(events(t, r.rd.snapshot(), r.w.ID())) >= len(want) })
		got := events(t, r.rd.snapshot(), r.w.ID())
		equalEvs(t, fmt.Sprintf("watcher %d from %d", i, r.rev), got, want)
		state := r.snap
		for _, x := range got {
			if x.typ == "PUT" {
				state[x.key] = x.val
			} else {
				delete(state, x.key)
			}
		}
		if len(state) != len(resp.Kvs) {
			t.Fatalf("watcher %d rebuilt %d keys, store has %d", i, len(state), len(resp.Kvs))
		}
		for _, kv := range resp.Kvs {
			if state[string(kv.Key)] != string(kv.Value) {
				t.Fatalf("watcher %d: %s=%q, store has %q", i, kv.Key, state[string(kv.Key)], kv.Value)
			}
		}
	}
	t.Logf("gaps %d, catch-ups %d", e.h.Stats().Gaps, e.h.Stats().CatchUps)
}

func TestProgressAndCancel(t *testing.T) {
	e := newEnv(t, Config{})
	st := e.h.NewStream()
	defer st.Close()
	rd := startReader(t, st)
	w, _ := st.Add(Spec{ID: 42, Key: []byte("x"), ProgressNotify: true, ProgressInterval: time.Millisecond}, 2, nil)
	if _, err := st.Add(Spec{ID: 42, Key: []byte("y")}, 2, nil); err != ErrDuplicateID {
		t.Fatalf("duplicate id: %v", err)
	}
	e.apply(put("y", "1"))
	rev := e.apply(put("y", "2"))
	testutil.Eventually(t, 10*time.Second, "hub at rev", func() bool { return e.h.Rev() == rev })
	time.Sleep(2 * time.Millisecond)
	st.NotifyIdle(time.Now())
	testutil.Eventually(t, 10*time.Second, "progress", func() bool { return len(rd.snapshot()) == 1 })
	p := rd.snapshot()[0]
	if p.WatchId != 42 || p.Header.Revision != rev || len(p.Events) != 0 {
		t.Fatalf("progress %v, want watch 42 at revision %d", p, rev)
	}
	st.RequestProgress()
	testutil.Eventually(t, 10*time.Second, "requested progress", func() bool { return len(rd.snapshot()) == 2 })
	if !st.Cancel(w.ID()) {
		t.Fatal("cancel failed")
	}
	testutil.Eventually(t, 10*time.Second, "canceled", func() bool { return len(rd.snapshot()) == 3 })
	if c := rd.snapshot()[2]; !c.Canceled || c.CancelStatus != "OK" {
		t.Fatalf("cancel response %v", c)
	}
	if st.Len() != 0 || e.h.Stats().Watchers != 0 {
		t.Fatalf("watch not removed: stream %d, hub %d", st.Len(), e.h.Stats().Watchers)
	}
}

// TestEncodeOnce checks that one event sent to many watchers is encoded
// once and that every watcher's response carries it.
func TestEncodeOnce(t *testing.T) {
	e := newEnv(t, Config{})
	var sts []*Stream
	for i := 0; i < 50; i++ {
		st := e.h.NewStream()
		defer st.Close()
		st.Add(Spec{Key: []byte("e/"), Prefix: true}, 2, nil) // from the first write (an empty store is at revision 1)
		sts = append(sts, st)
	}
	before := encodes.Load()
	e.apply(put("e/1", "v"))
	for _, st := range sts {
		<-st.Ready()
		rs := st.Pop()
		if len(rs) != 1 || len(decode(t, rs[0]).Events) != 1 {
			t.Fatalf("responses %v, want one with one event", rs)
		}
	}
	if n := encodes.Load() - before; n != 1 {
		t.Fatalf("event encoded %d times for 50 watchers, want once", n)
	}
}

// quietLogger keeps Pebble's informational chatter out of test output.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// TestProgressBeforeFanOutReachesStart: a progress request on a watch
// whose start the fan-out has not reached yet (it trails the applied
// revision after writes) is answered once it does, not dropped.
func TestProgressBeforeFanOutReachesStart(t *testing.T) {
	e := newEnv(t, Config{})
	st := e.h.NewStream()
	defer st.Close()
	rd := startReader(t, st)
	// The store is at revision 1; the watch starts at 4, as if created
	// right after writes the fan-out has not handed over yet.
	if _, err := st.Add(Spec{ID: 7, Key: []byte("x")}, 4, nil); err != nil {
		t.Fatal(err)
	}
	st.RequestProgress()
	e.apply(put("y", "1"))
	rev := e.apply(put("y", "2"))
	if rev != 3 {
		t.Fatalf("store at %d, want 3", rev)
	}
	testutil.Eventually(t, 10*time.Second, "progress once the fan-out reaches the start", func() bool { return len(rd.snapshot()) == 1 })
	p := rd.snapshot()[0]
	if p.WatchId != 7 || p.Header.Revision != 3 || len(p.Events) != 0 {
		t.Fatalf("progress %v, want watch 7 at revision 3", p)
	}
	// Answered once: a later write to another key sends nothing more.
	e.apply(put("x", "1"))
	testutil.Eventually(t, 10*time.Second, "the event", func() bool { return len(rd.snapshot()) == 2 })
	if ev := rd.snapshot()[1]; len(ev.Events) != 1 || ev.Header.Revision != 4 {
		t.Fatalf("got %v, want the put of x at 4", ev)
	}
}
