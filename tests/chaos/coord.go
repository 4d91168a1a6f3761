package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/client"
)

// This file holds the coordination workloads and their checkers: lock
// safety (store-enforced locks with fencing tokens), watch completeness
// and lease safety. Each workload records its events under its own
// Recorder stream; each checker reads only that stream, so a run without
// the workload (the broken-build test, the Docker test) checks nothing.

// Recorder streams of the coordination workloads.
const (
	LockStream      = "lock"
	WatchMetaStream = "watch-meta"
	LeaseStream     = "lease"
)

// CoordWorkloads returns the lock, watch and lease workloads over cls
// (pinned clients, one per member or more), for a run of duration d.
func CoordWorkloads(cls []*client.Client, seed int64, d, opTimeout time.Duration) []Workload {
	pick := func(i int) *client.Client { return cls[i%len(cls)] }
	return []Workload{
		&LockWorkload{Clients: []*client.Client{pick(0), pick(1), pick(2)}, Seed: seed, OpTimeout: opTimeout},
		&WatchWorkload{Clients: []*client.Client{pick(0), pick(1), pick(2)}, Duration: d},
		&LeaseWorkload{Keeper: pick(0), Readers: []*client.Client{pick(0), pick(1), pick(2)}, Seed: seed, OpTimeout: opTimeout},
		&RateLimitWorkload{Clients: []*client.Client{pick(0), pick(1), pick(2)}, OpTimeout: opTimeout},
		&SemaphoreWorkload{Clients: []*client.Client{pick(0), pick(1), pick(2)}, OpTimeout: opTimeout},
		&QueueWorkload{Clients: []*client.Client{pick(0), pick(1), pick(2)}, Seed: seed, OpTimeout: opTimeout},
		&CacheWorkload{Caches: []*client.Client{pick(0), pick(1), pick(2)}, Writers: []*client.Client{pick(1), pick(2)}, Seed: seed, OpTimeout: opTimeout},
		&SessionWorkload{Clients: []*client.Client{pick(0), pick(1), pick(2)}, OpTimeout: opTimeout},
		&IncrementWorkload{Clients: []*client.Client{pick(0), pick(1), pick(2)}, OpTimeout: opTimeout},
	}
}

// CoordCheckers are the checkers of the coordination workloads.
func CoordCheckers() []Checker {
	return []Checker{LockSafety{}, WatchCompleteness{}, LeaseSafety{}, RateLimitBound{}, SemaphoreBound{}, QueueSafety{}, CacheConsistency{}, SessionExact{}, ExactlyOnce{}}
}

func asClients(kvs []client.KV) []*client.Client {
	out := make([]*client.Client, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, kv.(*client.Client))
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	return sleepUntil(ctx, time.Now().Add(d))
}

// outcome classifies a write's result: ok, locked (refused by the lock
// table: an answer), unknown (may have applied), failed (did not apply,
// no answer about the lock).
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, client.ErrLocked):
		return "locked"
	case maybeApplied(err):
		return "unknown"
	default:
		return "failed"
	}
}

// ---------------------------------------------------------------- locks

// LockWrite is one guarded write to the lock key, value
// "w<worker>.t<token>.s<seq>".
type LockWrite struct {
	Worker    int
	Token     int64
	Value     string
	Call, Ret int64
	Outcome   string
	Rev       int64 // the put's revision when Outcome is ok
	// Stale: when it was called, a guarded write with a higher token had
	// already been acknowledged, so the handle was certainly superseded.
	Stale bool
	// Paused: made after the worker stopped renewing and slept past TTL.
	Paused bool
}

// LockHistory is what Final read back: every write applied to the lock
// key, in apply order (a watch from the run's start revision), and
// whether that read completed.
type LockHistory struct {
	Applied  []WatchRecord
	Complete bool
	Err      string
}

// LockWorkload has a few workers contend for one lock with TryAcquire (a
// short TTL, never renewed), write the key under the lock, and sometimes
// simulate a paused holder: sleep past the TTL and write again with the
// old handle.
type LockWorkload struct {
	Clients   []*client.Client
	Seed      int64
	Key       string        // default chaos-lock/L
	TTL       time.Duration // default 2s
	OpTimeout time.Duration // default 1s

	startRev int64
	maxAcked atomic.Int64 // highest token of an acknowledged guarded write
}

func (w *LockWorkload) Name() string { return "lock" }

func (w *LockWorkload) defaults() {
	if w.Key == "" {
		w.Key = "chaos-lock/L"
	}
	if w.TTL == 0 {
		w.TTL = 2 * time.Second
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = time.Second
	}
}

func (w *LockWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	_ = retry(ctx, func(ctx context.Context) error {
		r, err := w.Clients[0].Range(ctx, w.Key)
		if err == nil {
			w.startRev = r.Revision + 1
		}
		return err
	})
	var wg sync.WaitGroup
	for i, c := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.worker(ctx, i, c, rand.New(rand.NewPCG(uint64(w.Seed), 0x6c6f636b+uint64(i))), rec, stats)
		}()
	}
	wg.Wait()
}

func (w *LockWorkload) worker(ctx context.Context, id int, c *client.Client, rng *rand.Rand, rec *Recorder, stats *Stats) {
	seq := 0
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
		r, err := c.TryAcquire(octx, w.Key, w.TTL)
		cancel()
		if err != nil || !r.Acquired {
			sleepCtx(ctx, time.Duration(20+rng.IntN(100))*time.Millisecond)
			continue
		}
		h := r.Handle
		for n := 1 + rng.IntN(3); n > 0 && ctx.Err() == nil; n-- {
			seq++
			w.write(ctx, id, c, h, seq, false, rec, stats)
			sleepCtx(ctx, time.Duration(rng.IntN(150))*time.Millisecond)
		}
		if rng.IntN(3) == 0 {
			// A paused holder: no renewal, sleep past the TTL, then write
			// with the handle it still believes in.
			if !sleepCtx(ctx, w.TTL+time.Duration(200+rng.IntN(1500))*time.Millisecond) {
				return
			}
			seq++
			w.write(ctx, id, c, h, seq, true, rec, stats)
			continue
		}
		octx, cancel = context.WithTimeout(ctx, w.OpTimeout)
		_ = c.Release(octx, h)
		cancel()
	}
}

func (w *LockWorkload) write(ctx context.Context, id int, c *client.Client, h client.LockHandle, seq int, paused bool, rec *Recorder, stats *Stats) {
	val := fmt.Sprintf("w%d.t%d.s%d", id, h.Token, seq)
	stale := w.maxAcked.Load() > h.Token
	octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
	defer cancel()
	call := rec.Now()
	r, err := c.Put(octx, w.Key, []byte(val), client.WithLock(h))
	ret := rec.Now()
	lw := LockWrite{Worker: id, Token: h.Token, Value: val, Call: call, Ret: ret, Outcome: outcome(err), Stale: stale, Paused: paused}
	if err == nil {
		lw.Rev = r.Revision
		for {
			m := w.maxAcked.Load()
			if m >= h.Token || w.maxAcked.CompareAndSwap(m, h.Token) {
				break
			}
		}
	}
	stats.Op(map[string]string{"ok": "ok", "locked": "ok", "unknown": "unknown", "failed": "failed"}[lw.Outcome])
	rec.Append(LockStream, lw)
}

// Final reads back every write applied to the lock key, in apply order.
func (w *LockWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	start := w.startRev
	if start == 0 {
		start = 1
	}
	evs, err := collectUntilSentinel(ctx, w.Clients[0], w.Key, start)
	h := LockHistory{Complete: err == nil}
	if err != nil {
		h.Err = err.Error()
	}
	for _, e := range evs {
		if e.Key == w.Key {
			h.Applied = append(h.Applied, e)
		}
	}
	rec.Append(LockStream, h)
}

// LockSafety checks the lock workload: in apply order the fencing tokens
// of the lock key's writes never decrease; every acknowledged guarded
// write is in that history at its revision; no write is acknowledged
// with a token lower than one another holder had already had
// acknowledged (real time); and every write with a certainly superseded
// handle that got an answer got Locked, and none of them applied.
type LockSafety struct{}

func (LockSafety) Name() string { return "lock-safety" }

func (l LockSafety) Check(ctx context.Context, r *Run) []Anomaly {
	var ws []LockWrite
	var hist *LockHistory
	for _, e := range r.History.Stream(LockStream) {
		switch e := e.(type) {
		case LockWrite:
			ws = append(ws, e)
		case LockHistory:
			hist = &e
		}
	}
	if len(ws) == 0 && hist == nil {
		return nil
	}
	var out []Anomaly
	bad := func(format string, args ...any) {
		if len(out) < 20 {
			out = append(out, Anomaly{Checker: l.Name(), Msg: fmt.Sprintf(format, args...)})
		}
	}
	var acked []LockWrite
	for _, w := range ws {
		if w.Outcome == "ok" {
			acked = append(acked, w)
		}
		if w.Stale && w.Outcome == "ok" {
			bad("write %s with a superseded handle (token %d) was acknowledged at revision %d", w.Value, w.Token, w.Rev)
		}
	}
	// Real time: an acknowledged write must not carry a lower token than
	// one acknowledged (to another holder) before it was called.
	sort.Slice(acked, func(i, j int) bool { return acked[i].Ret < acked[j].Ret })
	for _, b := range acked {
		for _, a := range acked {
			if a.Ret >= b.Call {
				break
			}
			if a.Token > b.Token {
				bad("write %s (token %d) acknowledged after %s (token %d) had been", b.Value, b.Token, a.Value, a.Token)
				break
			}
		}
	}
	if hist == nil || !hist.Complete {
		msg := "no read-back of the lock key's history"
		if hist != nil {
			msg += ": " + hist.Err
		}
		bad("%s", msg)
		return out
	}
	stale, paused, locked := 0, 0, 0
	for _, w := range ws {
		if w.Stale {
			stale++
		}
		if w.Paused {
			paused++
		}
		if w.Outcome == "locked" {
			locked++
		}
	}
	r.Stats.Check("lock-writes", len(ws))
	r.Stats.Check("lock-acked", len(acked))
	r.Stats.Check("lock-refused", locked)
	r.Stats.Check("lock-stale-handle", stale)
	r.Stats.Check("lock-paused-holder", paused)
	r.Stats.Check("lock-history", len(hist.Applied))
	// Apply order, from the store's own history of the key.
	byVal := map[string]LockWrite{}
	for _, w := range ws {
		byVal[w.Value] = w
	}
	var last int64
	lastVal := ""
	applied := map[string]int64{}
	for _, e := range hist.Applied {
		if e.Type != "PUT" {
			continue
		}
		w, ok := byVal[e.Value]
		if !ok {
			bad("revision %d: value %q was never written by the workload", e.Rev, e.Value)
			continue
		}
		if w.Token < last {
			bad("fencing token went back in apply order: %s (token %d) at revision %d after %s (token %d)", e.Value, w.Token, e.Rev, lastVal, last)
		}
		if w.Stale {
			bad("write %s with a superseded handle applied at revision %d (outcome %s)", e.Value, e.Rev, w.Outcome)
		}
		last, lastVal = w.Token, e.Value
		applied[e.Value] = e.Rev
	}
	for _, w := range acked {
		if rev, ok := applied[w.Value]; !ok {
			bad("acknowledged write %s (revision %d) is not in the key's history", w.Value, w.Rev)
		} else if rev != w.Rev {
			bad("acknowledged write %s: revision %d acknowledged, %d in history", w.Value, w.Rev, rev)
		}
	}
	return out
}

// ---------------------------------------------------------------- watch

// WatchRecord is one watch event as a watcher saw it.
type WatchRecord struct {
	Rev   int64
	Key   string
	Type  string
	Value string
}

func (e WatchRecord) String() string {
	return fmt.Sprintf("%d %s %s=%q", e.Rev, e.Type, e.Key, e.Value)
}

// WatchMeta is what Final recorded about one watcher.
type WatchMeta struct {
	Name  string
	Start int64 // first revision whose events it delivers
	// Sentinel is the revision of Final's marker write; events up to it
	// are compared.
	Sentinel  int64
	Reference []WatchRecord // a fresh watch from Start on a healed cluster
	Err       string        // why the comparison could not be made
	// SnapshotDiff: with WithInitialSnapshot, how the snapshot differed
	// from a Range at its revision ("" if equal).
	SnapshotDiff string
}

// WatchWorkload runs watchers on the KV workload's window keys (prefix
// "w") through the faults: one WithInitialSnapshot, one from a past
// revision at the start, one created a third into the run from the
// run's start revision (a replay that races the faults).
type WatchWorkload struct {
	Clients  []*client.Client
	Prefix   string // default "w"
	Duration time.Duration

	startRev int64
	mu       sync.Mutex
	watchers []*watcher
	wg       sync.WaitGroup
}

type watcher struct {
	name   string
	w      *client.Watch
	cancel context.CancelFunc
	snap   *client.RangeResult
	mu     sync.Mutex
	events []WatchRecord
	err    error
}

func (w *WatchWorkload) Name() string { return "watch" }

func (w *WatchWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	if w.Prefix == "" {
		w.Prefix = "w"
	}
	_ = retry(ctx, func(ctx context.Context) error {
		r, err := w.Clients[0].Range(ctx, w.Prefix, client.WithPrefix(), client.WithCountOnly())
		if err == nil {
			w.startRev = r.Revision
		}
		return err
	})
	past := max(1, w.startRev-20)
	w.start(ctx, "snapshot", w.Clients[0], client.WithInitialSnapshot())
	w.start(ctx, fmt.Sprintf("from-%d", past), w.Clients[1%len(w.Clients)], client.WithStartRevision(past))
	if sleepCtx(ctx, w.Duration/3) {
		w.start(ctx, fmt.Sprintf("late-from-%d", w.startRev+1), w.Clients[2%len(w.Clients)], client.WithStartRevision(w.startRev+1))
	}
	<-ctx.Done()
}

// start creates a watch (retrying through faults) that outlives ctx: it
// runs until Final has compared it.
func (w *WatchWorkload) start(ctx context.Context, name string, c *client.Client, opt client.WatchOption) {
	var wa *client.Watch
	wctx, cancel := context.WithCancel(context.Background())
	err := retry(ctx, func(actx context.Context) error {
		// The watch's ctx bounds its whole life, so it cannot be actx.
		done := make(chan struct{})
		var err error
		go func() { defer close(done); wa, err = c.WatchPrefix(wctx, w.Prefix, opt) }()
		select {
		case <-done:
			return err
		case <-actx.Done():
			<-done
			if err == nil {
				return nil
			}
			return actx.Err()
		}
	})
	if err != nil || wa == nil {
		cancel()
		return
	}
	wt := &watcher{name: name, w: wa, cancel: cancel, snap: wa.Initial()}
	w.mu.Lock()
	w.watchers = append(w.watchers, wt)
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for b := range wa.Events() {
			wt.mu.Lock()
			for _, e := range b.Events {
				wt.events = append(wt.events, record(e))
			}
			wt.mu.Unlock()
		}
		wt.mu.Lock()
		wt.err = wa.Err()
		wt.mu.Unlock()
	}()
}

func record(e client.WatchEvent) WatchRecord {
	r := WatchRecord{Rev: e.Revision, Type: e.Type.String()}
	if e.KV != nil {
		r.Key = e.KV.Key
		r.Value = string(e.KV.Value)
	}
	return r
}

// Final writes a sentinel key, waits for every watcher to deliver it,
// and records each watcher's events and a reference history read by a
// fresh watch from the same start revision on the healed cluster.
func (w *WatchWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {
	w.mu.Lock()
	ws := append([]*watcher(nil), w.watchers...)
	w.mu.Unlock()
	defer func() {
		for _, wt := range ws {
			wt.cancel()
		}
		w.wg.Wait()
	}()
	c := w.Clients[0]
	sentinel := w.Prefix + "~end"
	var srev int64
	err := retry(ctx, func(ctx context.Context) error {
		r, err := c.Put(ctx, sentinel, []byte(fmt.Sprint(time.Now().UnixNano())))
		if err == nil {
			srev = r.Revision
		}
		return err
	})
	for _, wt := range ws {
		m := WatchMeta{Name: wt.name, Start: wt.w.StartRevision(), Sentinel: srev}
		if err != nil {
			m.Err = "sentinel write: " + err.Error()
			rec.Append(WatchMetaStream, m)
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			wt.mu.Lock()
			n := len(wt.events)
			got := n > 0 && wt.events[n-1].Rev >= srev
			werr := wt.err
			wt.mu.Unlock()
			if got {
				break
			}
			if werr != nil || wt.w.Err() != nil || time.Now().After(deadline) {
				m.Err = fmt.Sprintf("watcher did not deliver the sentinel at revision %d (watch error: %v)", srev, wt.w.Err())
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if m.Err == "" {
			m.Reference, err = collectUntil(ctx, c, w.Prefix, m.Start, srev)
			if err != nil {
				m.Err = "reference watch: " + err.Error()
			}
		}
		if wt.snap != nil {
			m.SnapshotDiff = snapshotDiff(ctx, c, w.Prefix, wt.snap)
		}
		wt.mu.Lock()
		for _, e := range wt.events {
			rec.Append("watch/"+wt.name, e)
		}
		wt.mu.Unlock()
		rec.Append(WatchMetaStream, m)
		stats.Op("ok")
	}
}

func snapshotDiff(ctx context.Context, c *client.Client, prefix string, snap *client.RangeResult) string {
	var want *client.RangeResult
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		want, err = c.Range(ctx, prefix, client.WithPrefix(), client.WithRev(snap.Revision))
		return err
	})
	if err != nil {
		return fmt.Sprintf("range at revision %d: %v", snap.Revision, err)
	}
	flat := func(r *client.RangeResult) string {
		var b strings.Builder
		for _, kv := range r.KVs {
			fmt.Fprintf(&b, "%s=%q@%d ", kv.Key, kv.Value, kv.ModRevision)
		}
		return b.String()
	}
	if a, b := flat(snap), flat(want); a != b {
		return fmt.Sprintf("snapshot at revision %d is %s; range at that revision is %s", snap.Revision, a, b)
	}
	return ""
}

// collectUntil reads prefix's events from start through revision until
// with a fresh watch.
func collectUntil(ctx context.Context, c *client.Client, prefix string, start, until int64) ([]WatchRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wa, err := c.WatchPrefix(ctx, prefix, client.WithStartRevision(start))
	if err != nil {
		return nil, err
	}
	defer wa.Stop()
	var out []WatchRecord
	for b := range wa.Events() {
		for _, e := range b.Events {
			if e.Revision <= until {
				out = append(out, record(e))
			}
		}
		if b.Revision >= until {
			return out, nil
		}
	}
	if err := wa.Err(); err != nil {
		return out, err
	}
	return out, ctx.Err()
}

// collectUntilSentinel reads key's history from start: it writes a
// sentinel next to key (key+"~end", never locked) and watches the
// range [key, key+"~end"] until the sentinel arrives.
func collectUntilSentinel(ctx context.Context, c *client.Client, key string, start int64) ([]WatchRecord, error) {
	var srev int64
	err := retry(ctx, func(ctx context.Context) error {
		r, err := c.Put(ctx, key+"~end", []byte("end"))
		if err == nil {
			srev = r.Revision
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return collectUntil(ctx, c, key, start, srev)
}

// WatchCompleteness checks that every watcher saw exactly the committed
// history of its prefix from its start revision up to Final's sentinel:
// in revision order, nothing missing, nothing twice, same values; and
// that an initial snapshot equals a Range at its revision.
type WatchCompleteness struct{}

func (WatchCompleteness) Name() string { return "watch-completeness" }

func (wc WatchCompleteness) Check(ctx context.Context, r *Run) []Anomaly {
	var out []Anomaly
	for _, e := range r.History.Stream(WatchMetaStream) {
		m := e.(WatchMeta)
		bad := func(format string, args ...any) {
			out = append(out, Anomaly{Checker: wc.Name(), Msg: fmt.Sprintf("watcher %s (from revision %d): ", m.Name, m.Start) + fmt.Sprintf(format, args...)})
		}
		if m.Err != "" {
			bad("%s", m.Err)
			continue
		}
		if m.SnapshotDiff != "" {
			bad("%s", m.SnapshotDiff)
		}
		var got []WatchRecord
		for _, ev := range r.History.Stream("watch/" + m.Name) {
			if e := ev.(WatchRecord); e.Rev <= m.Sentinel {
				got = append(got, e)
			}
		}
		for i := 1; i < len(got); i++ {
			if got[i].Rev < got[i-1].Rev {
				bad("event %d (%s) after %s: out of revision order", i, got[i], got[i-1])
				break
			}
		}
		if len(got) > 0 && got[0].Rev < m.Start {
			bad("first event %s is before the start revision", got[0])
		}
		r.Stats.Check("watchers", 1)
		r.Stats.Check("watch-events", len(got))
		n := min(len(got), len(m.Reference))
		i := 0
		for i < n && got[i] == m.Reference[i] {
			i++
		}
		switch {
		case i < n:
			bad("event %d differs: saw %s, committed history has %s (%d events seen, %d committed)", i, got[i], m.Reference[i], len(got), len(m.Reference))
		case len(got) > n:
			bad("%d events beyond the committed history, first %s", len(got)-n, got[n])
		case len(m.Reference) > n:
			bad("missed %d events, first %s", len(m.Reference)-n, m.Reference[n])
		}
	}
	return out
}

// ---------------------------------------------------------------- leases

// LeaseEvent is one step of the lease workload. Times are Recorder
// timestamps (ns since the run started).
type LeaseEvent struct {
	Kind  string // grant, attach, keepalive, read, lost
	Lease int64
	TTL   time.Duration
	// Sent is when the grant or keep-alive was first sent: the lease
	// lives at least TTL from then once it is acknowledged.
	Sent, Call, Ret int64
	Found           bool // read: the attached key existed
}

// LeaseWorkload keeps a lease alive with KeepAliveOnce every TTL/4
// (recording the send time of each acknowledged renewal), attaches a key
// to it, and has readers on every member read that key. If the lease is
// lost (a fault outlasting the TTL), it starts over with a new lease and
// key.
type LeaseWorkload struct {
	Keeper    *client.Client
	Readers   []*client.Client
	Seed      int64
	TTL       time.Duration // default 4s
	OpTimeout time.Duration
	// RenewEvery is the pause between renewals (default TTL/4). Renewing
	// late in the TTL, as a holder with delayed keep-alives would, leaves
	// an early expiry time to show. Every other renewal is followed, after
	// a random pause under 500ms, by another: the leader answers that one
	// from memory (the renew window), which a leader change must not
	// forget.
	RenewEvery time.Duration

	cur atomic.Int64 // the lease whose key is attached, 0 if none
}

func (w *LeaseWorkload) Name() string { return "lease" }

func leaseKey(id int64) string { return fmt.Sprintf("chaos-lease/%x", id) }

func (w *LeaseWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	if w.TTL == 0 {
		w.TTL = 4 * time.Second
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = time.Second
	}
	if w.RenewEvery == 0 {
		w.RenewEvery = w.TTL / 4
	}
	var wg sync.WaitGroup
	for i, c := range w.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.reader(ctx, c, rand.New(rand.NewPCG(uint64(w.Seed), 0x6c65617365+uint64(i))), rec, stats)
		}()
	}
	w.keeper(ctx, rand.New(rand.NewPCG(uint64(w.Seed), 0x6b656570)), rec, stats)
	wg.Wait()
}

func (w *LeaseWorkload) keeper(ctx context.Context, rng *rand.Rand, rec *Recorder, stats *Stats) {
	c := w.Keeper
	for ctx.Err() == nil {
		w.cur.Store(0)
		octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
		sent := rec.Now()
		g, err := c.Grant(octx, w.TTL)
		cancel()
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		rec.Append(LeaseStream, LeaseEvent{Kind: "grant", Lease: g.ID, TTL: w.TTL, Sent: sent, Ret: rec.Now()})
		octx, cancel = context.WithTimeout(ctx, w.OpTimeout)
		call := rec.Now()
		_, err = c.Put(octx, leaseKey(g.ID), []byte("alive"), client.WithLease(g.ID))
		cancel()
		if err == nil {
			rec.Append(LeaseStream, LeaseEvent{Kind: "attach", Lease: g.ID, Call: call, Ret: rec.Now()})
			w.cur.Store(g.ID)
			stats.Op("ok")
		}
		for n := 0; ctx.Err() == nil; n++ {
			if n%2 == 1 && rng.IntN(2) == 0 {
				sleepCtx(ctx, time.Duration(rng.Int64N(int64(500*time.Millisecond))))
			} else {
				sleepCtx(ctx, w.RenewEvery)
			}
			octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
			sent := rec.Now()
			ttl, err := c.KeepAliveOnce(octx, g.ID)
			cancel()
			if err == nil {
				rec.Append(LeaseStream, LeaseEvent{Kind: "keepalive", Lease: g.ID, TTL: ttl, Sent: sent, Ret: rec.Now()})
				stats.Op("ok")
				continue
			}
			if errors.Is(err, client.ErrLeaseNotFound) {
				rec.Append(LeaseStream, LeaseEvent{Kind: "lost", Lease: g.ID, Ret: rec.Now()})
				break
			}
		}
	}
}

func (w *LeaseWorkload) reader(ctx context.Context, c *client.Client, rng *rand.Rand, rec *Recorder, stats *Stats) {
	for sleepCtx(ctx, time.Duration(30+rng.IntN(120))*time.Millisecond) {
		id := w.cur.Load()
		if id == 0 {
			continue
		}
		octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
		call := rec.Now()
		_, err := c.Get(octx, leaseKey(id))
		ret := rec.Now()
		cancel()
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			continue
		}
		stats.Op("ok")
		rec.Append(LeaseStream, LeaseEvent{Kind: "read", Lease: id, Call: call, Ret: ret, Found: err == nil})
	}
}

func (w *LeaseWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {}

// LeaseSafety checks that a lease never expired before its TTL: a read
// that found the lease's attached key missing must not have returned
// before TTL (minus Margin) after the send of a grant or keep-alive that
// was acknowledged before the read was called (and after the key was
// attached).
type LeaseSafety struct {
	// Margin absorbs clock reads and scheduling (default 1s).
	Margin time.Duration
}

func (LeaseSafety) Name() string { return "lease-safety" }

func (l LeaseSafety) Check(ctx context.Context, r *Run) []Anomaly {
	margin := l.Margin
	if margin == 0 {
		margin = time.Second
	}
	type renewal struct{ sent, ret int64 }
	renewals := map[int64][]renewal{}
	attached := map[int64]int64{}
	var reads []LeaseEvent
	for _, e := range r.History.Stream(LeaseStream) {
		e := e.(LeaseEvent)
		switch e.Kind {
		case "grant", "keepalive":
			renewals[e.Lease] = append(renewals[e.Lease], renewal{e.Sent + int64(e.TTL), e.Ret})
		case "attach":
			attached[e.Lease] = e.Ret
		case "read":
			reads = append(reads, e)
		}
	}
	var out []Anomaly
	n, missing, ka := 0, 0, 0
	for _, rs := range renewals {
		ka += len(rs)
	}
	defer func() {
		r.Stats.Check("lease-renewals", ka)
		r.Stats.Check("lease-reads", n)
		r.Stats.Check("lease-reads-missing", missing)
	}()
	for _, rd := range reads {
		n++
		if !rd.Found {
			missing++
		}
		at, ok := attached[rd.Lease]
		if rd.Found || !ok || at >= rd.Call {
			continue
		}
		var alive int64 // the lease is surely alive until then
		for _, rn := range renewals[rd.Lease] {
			if rn.ret < rd.Call && rn.sent > alive {
				alive = rn.sent
			}
		}
		if rd.Ret < alive-int64(margin) {
			out = append(out, Anomaly{Checker: l.Name(), Msg: fmt.Sprintf(
				"lease %x: attached key missing in a read returning at %.3fs, but the lease was renewed to live until %.3fs",
				rd.Lease, time.Duration(rd.Ret).Seconds(), time.Duration(alive).Seconds())})
			if len(out) >= 20 {
				break
			}
		}
	}
	return out
}
