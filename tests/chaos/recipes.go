package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// This file holds the checkers of the shared-state recipes: the
// watch-backed cache and the session store's Update.

// Recorder streams of CacheWorkload and SessionWorkload.
const (
	CacheSampleStream  = "cache-sample"
	CacheCallStream    = "cache-call"
	CacheFinalStream   = "cache-final"
	CacheHistoryStream = "cache-history"
	SessionStream      = "session"
	SessionFinalStream = "session-final"
)

// CacheKV is one cached or stored key, as the checkers compare it.
type CacheKV struct {
	Key, Value string
	Mod        int64
}

func (kv CacheKV) String() string { return fmt.Sprintf("%s=%s@%d", kv.Key, kv.Value, kv.Mod) }

func cacheKVs(kvs []*client.KeyValue) []CacheKV {
	out := make([]CacheKV, len(kvs))
	for i, kv := range kvs {
		out[i] = CacheKV{Key: kv.Key, Value: string(kv.Value), Mod: kv.ModRevision}
	}
	return out
}

// CacheSample is one cache's contents at its revision, read together
// (Cache.Snapshot) while faults were being injected, or at the end.
type CacheSample struct {
	Cache int
	Rev   int64
	KVs   []CacheKV
}

// CacheCall is one handler call of one cache, in the order made: Kind
// "add" (KV), "update" (Old -> KV) or "delete" (Old).
type CacheCall struct {
	Cache   int
	Kind    string
	KV, Old CacheKV
}

// CacheFinal is what Final learnt of one cache: the revision it started
// following at (after its snapshot), how many of its calls were the
// snapshot's, its resyncs, and whether it reached the final write.
type CacheFinal struct {
	Cache     int
	Start     int64
	SnapCalls int
	Resyncs   int
	Final     int64
	Err       string
}

// CacheHistory is every change under the prefix after From, up to and
// including the final write, read back with a watch.
type CacheHistory struct {
	From     int64
	Events   []CacheEvent
	Complete bool
	Err      string
}

// CacheEvent is one change of CacheHistory.
type CacheEvent struct {
	Rev    int64 // the change's revision
	Delete bool
	KV     CacheKV
}

// CacheWorkload runs one watch-backed cache per client (each pinned to a
// member) over a small prefix while writers put and delete its keys. It
// samples each cache's contents as faults come and go, records every
// handler call, and in Final makes a last write that every cache must
// reach.
type CacheWorkload struct {
	Caches    []*client.Client // one cache each
	Writers   []*client.Client
	Prefix    string
	Keys      int
	Seed      int64
	OpTimeout time.Duration

	mu     sync.Mutex
	caches []*recipe.Cache
	final  []CacheFinal
	cancel context.CancelFunc
}

// Name implements Workload.
func (w *CacheWorkload) Name() string { return "cache" }

func (w *CacheWorkload) defaults() {
	if w.Prefix == "" {
		w.Prefix = "chaos/cache/"
	}
	if w.Keys == 0 {
		w.Keys = 8
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = 2 * time.Second
	}
}

// Run implements Workload.
func (w *CacheWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	// The caches outlive Run: Final checks where they got to.
	cctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	w.cancel = cancel
	w.caches = make([]*recipe.Cache, len(w.Caches))
	w.final = make([]CacheFinal, len(w.Caches))
	w.mu.Unlock()
	var wg sync.WaitGroup
	for i, c := range w.Caches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.follow(ctx, cctx, i, c, rec)
		}()
	}
	for i, c := range w.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w.Seed), uint64(i)))
			for ctx.Err() == nil {
				key := fmt.Sprintf("%sk%d", w.Prefix, rng.IntN(w.Keys))
				octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
				var err error
				if rng.IntN(4) == 0 {
					_, err = c.Delete(octx, key)
				} else {
					_, err = c.Put(octx, key, []byte(strconv.Itoa(rng.IntN(1000))))
				}
				cancel()
				stats.Op(outcome(err))
				if err != nil {
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				sleepCtx(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// follow opens cache i (retrying through faults) and samples it until
// ctx ends.
func (w *CacheWorkload) follow(ctx, cctx context.Context, i int, c *client.Client, rec *Recorder) {
	var (
		mu     sync.Mutex // the handler and the ready hook run on the cache's goroutines
		snap   int        // calls before ready: the snapshot's
		opened bool
		start  int64
	)
	record := func(call CacheCall) {
		mu.Lock()
		if !opened {
			snap++
		}
		mu.Unlock()
		rec.Append(CacheCallStream, call)
	}
	h := recipe.CacheHandler{
		OnAdd: func(kv *client.KeyValue) {
			record(CacheCall{Cache: i, Kind: "add", KV: cacheKVs([]*client.KeyValue{kv})[0]})
		},
		OnUpdate: func(old, cur *client.KeyValue) {
			kvs := cacheKVs([]*client.KeyValue{old, cur})
			record(CacheCall{Cache: i, Kind: "update", Old: kvs[0], KV: kvs[1]})
		},
		OnDelete: func(old *client.KeyValue) {
			record(CacheCall{Cache: i, Kind: "delete", Old: cacheKVs([]*client.KeyValue{old})[0]})
		},
	}
	ready := recipe.WithCacheReady(func(c *recipe.Cache) {
		mu.Lock()
		opened, start = true, c.Revision()
		mu.Unlock()
	})
	var cache *recipe.Cache
	for cache == nil {
		if ctx.Err() != nil {
			return
		}
		// A failed NewCache made no handler call: its snapshot read
		// failed. Its context is the cache's life, so a snapshot read
		// stuck behind a fault is abandoned, not waited for, when Run
		// ends (it closes itself if it opens later).
		type opened struct {
			c   *recipe.Cache
			err error
		}
		ch := make(chan opened, 1)
		go func() {
			cc, err := recipe.NewCache(cctx, c, w.Prefix, recipe.WithCacheHandler(h),
				recipe.WithCacheProgressInterval(200*time.Millisecond), ready)
			ch <- opened{cc, err}
		}()
		select {
		case o := <-ch:
			if o.err != nil {
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
			cache = o.c
		case <-ctx.Done():
			go func() {
				if o := <-ch; o.c != nil {
					o.c.Close()
				}
			}()
			return
		}
	}
	mu.Lock()
	w.mu.Lock()
	w.caches[i] = cache
	w.final[i] = CacheFinal{Cache: i, Start: start, SnapCalls: snap}
	w.mu.Unlock()
	mu.Unlock()
	var last int64
	samples := 0
	for sleepCtx(ctx, 250*time.Millisecond) && samples < 400 {
		rev, kvs := cache.Snapshot()
		if rev == last {
			continue
		}
		last = rev
		samples++
		rec.Append(CacheSampleStream, CacheSample{Cache: i, Rev: rev, KVs: cacheKVs(kvs)})
	}
}

// Final implements Workload: a last write under the prefix, which every
// cache must reach; their final contents; and the prefix's history.
func (w *CacheWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {
	w.mu.Lock()
	caches, finals, cancel := w.caches, w.final, w.cancel
	w.mu.Unlock()
	if cancel == nil || len(w.Writers) == 0 {
		return
	}
	defer cancel()
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	defer fcancel()
	var frev int64
	for frev == 0 && fctx.Err() == nil {
		r, err := w.Writers[0].Put(fctx, w.Prefix+"~final", []byte("final"))
		if err == nil {
			frev = r.Revision
			break
		}
		sleepCtx(fctx, 100*time.Millisecond)
	}
	from := int64(-1)
	for i, cache := range caches {
		f := finals[i]
		if cache == nil {
			continue // never opened: nothing to check
		}
		f.Final = frev
		if frev == 0 {
			f.Err = "the final write never succeeded"
		} else if err := cache.WaitForRevision(fctx, frev); err != nil {
			f.Err = fmt.Sprintf("the cache did not reach the final write's revision %d (at %d): %v", frev, cache.Revision(), err)
		}
		rev, kvs := cache.Snapshot()
		cache.Close()
		f.Resyncs = cache.Resyncs()
		rec.Append(CacheSampleStream, CacheSample{Cache: i, Rev: rev, KVs: cacheKVs(kvs)})
		rec.Append(CacheFinalStream, f)
		if from < 0 || f.Start < from {
			from = f.Start
		}
	}
	if from < 0 || frev == 0 {
		return
	}
	rec.Append(CacheHistoryStream, w.history(fctx, from, frev))
}

// history reads every change under the prefix in (from, to] with a watch.
func (w *CacheWorkload) history(ctx context.Context, from, to int64) CacheHistory {
	h := CacheHistory{From: from}
	wt, err := w.Writers[0].WatchPrefix(ctx, w.Prefix, client.WithStartRevision(from+1))
	if err != nil {
		h.Err = err.Error()
		return h
	}
	defer wt.Stop()
	for b := range wt.Events() {
		for _, ev := range b.Events {
			h.Events = append(h.Events, CacheEvent{Rev: b.Revision, Delete: ev.Type == client.EventDelete, KV: cacheKVs([]*client.KeyValue{ev.KV})[0]})
		}
		if b.Revision >= to {
			h.Complete = true
			return h
		}
	}
	if err := wt.Err(); err != nil {
		h.Err = err.Error()
	}
	return h
}

// CacheConsistency checks CacheWorkload: every sample of a cache equals
// a linearizable read of the prefix at the sample's revision; each
// cache's handler calls replay (an add of an absent key, an update or
// delete of exactly the version replayed so far) to its final contents;
// each cache reached the final write; and a cache that never resynced
// made exactly one call per change of the history after its snapshot,
// in order.
type CacheConsistency struct{}

// Name implements Checker.
func (CacheConsistency) Name() string { return "cache-consistency" }

// Check implements Checker.
func (c CacheConsistency) Check(ctx context.Context, r *Run) []Anomaly {
	finals := r.History.Stream(CacheFinalStream)
	if len(finals) == 0 {
		return nil
	}
	var out []Anomaly
	bad := func(format string, args ...any) {
		if len(out) < 20 {
			out = append(out, Anomaly{Checker: c.Name(), Msg: fmt.Sprintf(format, args...)})
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cl, err := client.New(cctx, client.Config{Endpoints: r.Endpoints, DialTimeout: 10 * time.Second, AutoSyncInterval: -1})
	if err != nil {
		return []Anomaly{{Checker: c.Name(), Msg: "dial: " + err.Error()}}
	}
	defer cl.Close()
	prefix := (&CacheWorkload{}).prefix()

	// Samples against the store.
	last := map[int]CacheSample{}
	checked := 0
	for _, ev := range r.History.Stream(CacheSampleStream) {
		s := ev.(CacheSample)
		last[s.Cache] = s
		rr, err := cl.List(cctx, prefix, client.WithRev(s.Rev))
		if errors.Is(err, client.ErrCompacted) {
			continue
		}
		if err != nil {
			bad("reading the prefix at revision %d: %v", s.Rev, err)
			continue
		}
		checked++
		if got, want := kvsString(s.KVs), kvsString(cacheKVs(rr.KVs)); got != want {
			bad("cache %d at revision %d holds [%s], the store [%s]", s.Cache, s.Rev, got, want)
		}
	}
	r.Stats.Check("cache samples", checked)

	// Handler calls replay to the final contents.
	calls := map[int][]CacheCall{}
	for _, ev := range r.History.Stream(CacheCallStream) {
		call := ev.(CacheCall)
		calls[call.Cache] = append(calls[call.Cache], call)
	}
	var hist *CacheHistory
	if hs := r.History.Stream(CacheHistoryStream); len(hs) > 0 {
		h := hs[0].(CacheHistory)
		hist = &h
	}
	for _, ev := range finals {
		f := ev.(CacheFinal)
		if f.Err != "" {
			bad("cache %d: %s", f.Cache, f.Err)
			continue
		}
		r.Stats.Check("cache handler calls", len(calls[f.Cache]))
		model, msg := replayCacheCalls(calls[f.Cache])
		if msg != "" {
			bad("cache %d: %s", f.Cache, msg)
			continue
		}
		if got, want := kvsString(modelKVs(model)), kvsString(last[f.Cache].KVs); got != want {
			bad("cache %d: its handler calls replay to [%s], its contents are [%s]", f.Cache, got, want)
		}
		if f.Resyncs > 0 || hist == nil {
			continue // a resync folds the changes it skipped: the replay is the contract
		}
		if !hist.Complete {
			bad("history of the prefix after %d incomplete: %s", hist.From, hist.Err)
			continue
		}
		if msg := cacheCallsMatchHistory(calls[f.Cache][f.SnapCalls:], model0(calls[f.Cache][:f.SnapCalls]), *hist, f.Start); msg != "" {
			bad("cache %d: %s", f.Cache, msg)
		}
		r.Stats.Check("cache calls matched to the history", len(calls[f.Cache])-f.SnapCalls)
	}
	return out
}

func (w *CacheWorkload) prefix() string { w.defaults(); return w.Prefix }

func kvsString(kvs []CacheKV) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = kv.String()
	}
	return strings.Join(parts, " ")
}

func modelKVs(m map[string]CacheKV) []CacheKV {
	out := make([]CacheKV, 0, len(m))
	for _, kv := range m {
		out = append(out, kv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// replayCacheCalls applies a cache's handler calls to an empty map; a
// call that does not fit what came before is a missed or duplicated one.
func replayCacheCalls(calls []CacheCall) (map[string]CacheKV, string) {
	m := map[string]CacheKV{}
	lastMod := map[string]int64{}
	for n, call := range calls {
		key := call.KV.Key
		if call.Kind == "delete" {
			key = call.Old.Key
		}
		cur, ok := m[key]
		switch call.Kind {
		case "add":
			if ok {
				return nil, fmt.Sprintf("call %d: OnAdd %s, already added as %s (duplicated, or a delete missed)", n, call.KV, cur)
			}
		case "update", "delete":
			if !ok || cur != call.Old {
				return nil, fmt.Sprintf("call %d: On%s of %s, but the calls so far give %v (a call missed or repeated)", n, call.Kind, call.Old, cur)
			}
		}
		if call.Kind == "delete" {
			delete(m, key)
			continue
		}
		if call.KV.Mod <= lastMod[key] {
			return nil, fmt.Sprintf("call %d: %s after a call for it at revision %d", n, call.KV, lastMod[key])
		}
		lastMod[key] = call.KV.Mod
		m[key] = call.KV
	}
	return m, ""
}

func model0(snap []CacheCall) map[string]CacheKV {
	m, _ := replayCacheCalls(snap)
	return m
}

// cacheCallsMatchHistory: after its snapshot at start, a cache that
// never resynced calls its handlers once per change of the history, in
// order (a delete of a key it does not hold is no change).
func cacheCallsMatchHistory(calls []CacheCall, model map[string]CacheKV, h CacheHistory, start int64) string {
	var want []string
	for _, ev := range h.Events {
		if ev.Rev <= start {
			continue
		}
		if ev.Delete {
			if _, ok := model[ev.KV.Key]; !ok {
				continue
			}
			delete(model, ev.KV.Key)
			want = append(want, "delete "+ev.KV.Key)
			continue
		}
		model[ev.KV.Key] = ev.KV
		want = append(want, "put "+ev.KV.String())
	}
	got := make([]string, len(calls))
	for i, c := range calls {
		if c.Kind == "delete" {
			got[i] = "delete " + c.Old.Key
		} else {
			got[i] = "put " + c.KV.String()
		}
	}
	for i := range max(len(got), len(want)) {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf("handler call %d after the snapshot at %d is %s, the history's change is %s (%d calls, %d changes)", i, start, g, w, len(got), len(want))
		}
	}
	return ""
}

// --------------------------------------------------------------- sessions

// SessionIncr is one session Update that added one to the counter:
// Outcome ok (Value is the count it wrote), unknown (it may have
// applied) or failed (it did not).
type SessionIncr struct {
	Worker  int
	Outcome string
	Value   int
}

// SessionFinal is the counter read back after the faults.
type SessionFinal struct {
	Value int
	Err   string
}

// SessionWorkload has several workers on each client (each client a
// separate instance with its own SessionStore) increment a counter in
// one session with Update, through every fault.
type SessionWorkload struct {
	Clients   []*client.Client
	Token     string
	Workers   int // per client, default 3
	OpTimeout time.Duration

	stores []*recipe.SessionStore
}

// Name implements Workload.
func (w *SessionWorkload) Name() string { return "session" }

func (w *SessionWorkload) defaults() {
	if w.Token == "" {
		w.Token = "chaos-cart"
	}
	if w.Workers == 0 {
		w.Workers = 3
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = 2 * time.Second
	}
}

func sessionIncr(old []byte) ([]byte, error) {
	n := 0
	if old != nil {
		var err error
		if n, err = strconv.Atoi(string(old)); err != nil {
			return nil, err
		}
	}
	return []byte(strconv.Itoa(n + 1)), nil
}

// Run implements Workload.
func (w *SessionWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	w.stores = nil
	for _, c := range w.Clients {
		s, err := recipe.NewSessionStore(c, recipe.WithSessionStorePrefix("chaos/session/"))
		if err != nil {
			panic(err) // the options are constant
		}
		w.stores = append(w.stores, s)
	}
	var wg sync.WaitGroup
	for i := range w.Workers * len(w.stores) {
		s := w.stores[i%len(w.stores)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
				out, err := s.Update(octx, w.Token, sessionIncr)
				cancel()
				o := outcome(err)
				stats.Op(o)
				ev := SessionIncr{Worker: i, Outcome: o}
				if err == nil {
					ev.Value, _ = strconv.Atoi(string(out))
				}
				rec.Append(SessionStream, ev)
				if err != nil {
					sleepCtx(ctx, 20*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// Final implements Workload: read the counter.
func (w *SessionWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {
	if len(w.stores) == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		data, _, err := w.stores[0].Get(fctx, w.Token)
		if err == nil {
			n := 0
			if data != nil {
				n, err = strconv.Atoi(string(data))
			}
			f := SessionFinal{Value: n}
			if err != nil {
				f.Err = err.Error()
			}
			rec.Append(SessionFinalStream, f)
			return
		}
		if !sleepCtx(fctx, 100*time.Millisecond) {
			rec.Append(SessionFinalStream, SessionFinal{Err: "reading the counter: " + err.Error()})
			return
		}
	}
}

// SessionExact checks SessionWorkload: no two acknowledged Updates wrote
// the same count (one would have overwritten the other: a lost
// increment), and the final count is at least the acknowledged Updates
// and at most those plus the ones whose outcome is unknown.
type SessionExact struct{}

// Name implements Checker.
func (SessionExact) Name() string { return "session-exact" }

// Check implements Checker.
func (c SessionExact) Check(ctx context.Context, r *Run) []Anomaly {
	fs := r.History.Stream(SessionFinalStream)
	if len(fs) == 0 {
		return nil
	}
	f := fs[0].(SessionFinal)
	if f.Err != "" {
		return []Anomaly{{Checker: c.Name(), Msg: f.Err}}
	}
	var incs []SessionIncr
	for _, ev := range r.History.Stream(SessionStream) {
		incs = append(incs, ev.(SessionIncr))
	}
	msg := SessionViolation(incs, f.Value)
	r.Stats.Check("session updates", len(incs))
	if msg != "" {
		return []Anomaly{{Checker: c.Name(), Msg: msg}}
	}
	return nil
}

// SessionViolation returns "" if the increments and the final count
// agree, or else how they do not.
func SessionViolation(incs []SessionIncr, final int) string {
	acked, unknown := 0, 0
	seen := map[int]int{}
	for _, in := range incs {
		switch in.Outcome {
		case "ok":
			acked++
			if w, dup := seen[in.Value]; dup {
				return fmt.Sprintf("workers %d and %d both wrote count %d: an increment was lost", w, in.Worker, in.Value)
			}
			seen[in.Value] = in.Worker
			if in.Value > final {
				return fmt.Sprintf("worker %d wrote count %d, but the final count is %d", in.Worker, in.Value, final)
			}
		case "unknown":
			unknown++
		}
	}
	if final < acked {
		return fmt.Sprintf("final count %d, but %d Updates were acknowledged: %d increments lost", final, acked, acked-final)
	}
	if final > acked+unknown {
		return fmt.Sprintf("final count %d exceeds %d acknowledged + %d unknown Updates: an increment applied twice", final, acked, unknown)
	}
	return ""
}
