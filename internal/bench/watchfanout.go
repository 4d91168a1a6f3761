package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/bench/runner"
)

func init() {
	Register("watch-fanout", "--watchers watches on one prefix spread over --watch-conns connections (one Watch stream each, round-robin over the endpoints, e.g. proxies); --clients writers (default 4 here) put values numbered per writer at --rate in all; checks every watcher got every acknowledged put once and in order (each writer's numbers ascending, revisions ascending) (extra: missing, duplicate, out_of_order, anomalies; the command fails when anomalies > 0)", func() Workload { return &fanoutWorkload{} })
}

// FanoutPrefix is the prefix the watch-fanout workload watches and writes
// under.
func FanoutPrefix(o *Options) string { return o.KeyPrefix + "fanout/" }

// fanoutDrainIdle and fanoutDrainMax bound how long Finish waits for the
// last puts' events: a hundred thousand watchers behind a loaded proxy
// take longer to reach than the watch workload's few.
const (
	fanoutDrainIdle = 5 * time.Second
	fanoutDrainMax  = 60 * time.Second
)

// fanoutCreateTimeout bounds the creation of n watches: the op timeout
// (at least 10 s) plus a second per thousand watches, since a member or
// proxy creates them one at a time per stream.
func fanoutCreateTimeout(o *Options, n int) time.Duration {
	return max(o.OpTimeout, 10*time.Second) + time.Duration(n/1000)*time.Second
}

// fanoutSetupWorkers is how many streams Setup opens at once.
const fanoutSetupWorkers = 32

type fanoutWorkload struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*grpc.ClientConn
	stats  []*runner.EventStats // one per stream
	// checks[k][i] follows writer k's numbers at watcher i (watch id
	// i+1); lastRev[i] the last revision watcher i received.
	checks  [][]seqCheck
	lastRev []int64
	revBack atomic.Int64 // events whose revision was not above the watcher's last
	// Counted by the receivers; read after they stopped.
	foreign    atomic.Int64 // events whose value carries no sequence number
	canceled   atomic.Int64 // watches the server cancelled
	streamErrs atomic.Int64 // streams that ended before Finish stopped them
	stopping   atomic.Bool

	start   time.Time
	created time.Duration

	// Each writer numbers its puts from 1; acked[k][s] says writer k's
	// put s was acknowledged. A failed put may or may not have applied,
	// so its number is neither expected nor missing. A writer waits for
	// each put before the next, so its numbers are in revision order.
	run   uint64 // this run's id in every value, so another run's values are foreign
	mu    sync.Mutex
	acked [][]bool
}

// Setup dials --watch-conns connections round-robin over the endpoints,
// opens one Watch stream on each, creates the watchers over them
// round-robin, and waits until every watch is created, so the first put
// is seen by all.
func (w *fanoutWorkload) Setup(ctx context.Context, env *Env) error {
	o := env.Opts
	n := o.Watchers
	streams := min(max(o.WatchConns, 1), max(n, 1))
	prefix := []byte(FanoutPrefix(o))
	w.checks = make([][]seqCheck, o.Clients)
	w.acked = make([][]bool, o.Clients)
	for k := range w.checks {
		w.checks[k] = make([]seqCheck, n)
		w.acked[k] = []bool{false}
	}
	w.lastRev = make([]int64, n)
	w.run = o.Seed
	begin := time.Now()
	wopts := *o
	wopts.Conns = streams
	conns, err := dialAll(ctx, &wopts)
	if err != nil {
		return err
	}
	w.conns = conns
	wctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	created := make(chan error, 2*n+streams) // never blocks: created, canceled per watch, one error per stream
	w.stats = make([]*runner.EventStats, streams)
	err = fanOut(ctx, streams, fanoutSetupWorkers, true, func(int) func(context.Context, int) error {
		return func(_ context.Context, s int) error {
			st, err := dkvpb.NewWatchClient(conns[s]).Watch(wctx)
			if err != nil {
				return fmt.Errorf("opening watch stream %d on %s: %w", s, wopts.Endpoints[s%len(wopts.Endpoints)], err)
			}
			stats := &runner.EventStats{}
			w.stats[s] = stats
			w.wg.Add(1)
			go w.receive(st, stats, created)
			for j := s; j < n; j += streams {
				err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{
					Key: prefix, Prefix: true, WatchId: int64(j + 1),
				}}})
				if err != nil {
					return fmt.Errorf("creating watch %d: %w", j+1, err)
				}
			}
			return nil
		}
	})
	if err != nil {
		w.stop()
		return err
	}
	var progress func(int)
	if o.Progress != nil {
		progress = func(done int) {
			if done%max(n/10, 1) == 0 {
				fmt.Fprintf(o.Progress, "watch-fanout: %d/%d watches created (%.1fs)\n", done, n, time.Since(begin).Seconds())
			}
		}
	}
	if err := awaitCreated(ctx, created, n, fanoutCreateTimeout(o, n), progress); err != nil {
		w.stop()
		return err
	}
	w.start = time.Now()
	w.created = w.start.Sub(begin)
	return nil
}

// receive reads one stream until it ends, checking each event's sequence
// number against its watcher. Only this goroutine touches the watchers
// created on st, so their checks need no lock.
func (w *fanoutWorkload) receive(st dkvpb.Watch_WatchClient, stats *runner.EventStats, created chan<- error) {
	defer w.wg.Done()
	for {
		resp, err := st.Recv()
		if err != nil {
			if !w.stopping.Load() {
				w.streamErrs.Add(1)
			}
			created <- err // ignored once Setup returned
			return
		}
		now := time.Now()
		if ackCreate(resp, created) {
			w.canceled.Add(1)
		}
		id := resp.GetWatchId() - 1
		for _, ev := range resp.GetEvents() {
			if ev.GetType() != dkvpb.Event_PUT {
				continue
			}
			v := ev.GetKv().GetValue()
			k, s, ok := parseFanoutSeq(v, w.run)
			if !ok || k >= len(w.checks) || id < 0 || id >= int64(len(w.lastRev)) {
				w.foreign.Add(1)
				continue
			}
			w.checks[k][id].see(s)
			if rev := ev.GetKv().GetModRevision(); rev <= w.lastRev[id] {
				w.revBack.Add(1)
			} else {
				w.lastRev[id] = rev
			}
			stats.Record(v, now)
		}
	}
}

func (w *fanoutWorkload) stop() {
	w.stopping.Store(true)
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
	for _, c := range w.conns {
		c.Close()
	}
}

// NewWorker is writer i: each op puts its next number, with its send
// time, to its own key under the prefix.
func (w *fanoutWorkload) NewWorker(i int, env *Env) (Worker, error) {
	kv := env.WriteKV(i)
	filler := env.Value(env.Rand(i))
	key := appendKey(nil, FanoutPrefix(env.Opts), i)
	var seq int64
	return WorkerFunc(func(ctx context.Context) error {
		seq++
		_, err := kv.Put(ctx, &dkvpb.PutRequest{Key: key, Value: fanoutValue(filler, w.run, i, seq, time.Now())})
		w.mu.Lock()
		w.acked[i] = append(w.acked[i], err == nil)
		w.mu.Unlock()
		return err
	}), nil
}

// Finish waits for the last events, stops the watches and reports, in
// res.Extra, the event counts and latency (as the watch workload does)
// and the check: missing, duplicate and out-of-order deliveries, summed
// in anomalies.
func (w *fanoutWorkload) Finish(ctx context.Context, env *Env, res *Result) error {
	w.mu.Lock()
	acked := make([][]bool, len(w.acked))
	for k := range acked {
		acked[k] = slices.Clone(w.acked[k])
	}
	w.mu.Unlock()
	var nAcked, nPuts int64
	for _, a := range acked {
		nPuts += int64(len(a) - 1)
		for _, ok := range a {
			if ok {
				nAcked++
			}
		}
	}
	expected := nAcked * int64(len(w.lastRev))
	runner.WaitEvents(ctx, w.stats, expected, fanoutDrainIdle, fanoutDrainMax)
	w.stop()
	runner.FillEventExtra(res, w.stats, w.start, len(w.lastRev), expected)
	var r checkResult
	for k := range w.checks {
		r.add(checkAll(w.checks[k], acked[k]))
	}
	e := res.Extra
	e["watch_conns"] = float64(len(w.conns))
	e["create_seconds"] = w.created.Seconds()
	e["puts_acked"] = float64(nAcked)
	e["puts_unknown"] = float64(nPuts - nAcked)
	e["missing"] = float64(r.missing)
	e["duplicate"] = float64(r.dups)
	e["out_of_order"] = float64(r.reorders)
	e["foreign_events"] = float64(w.foreign.Load())
	e["watches_canceled"] = float64(w.canceled.Load())
	e["stream_errors"] = float64(w.streamErrs.Load())
	e["revision_not_increasing"] = float64(w.revBack.Load())
	e["anomalies"] = float64(r.missing + r.dups + r.reorders + w.foreign.Load() + w.canceled.Load() + w.revBack.Load())
	return nil
}

// fanoutValue is a stamped value (runner.StampValue: send time first)
// followed by "run:writer:seq|" (run in hex), then filler.
func fanoutValue(filler []byte, run uint64, writer int, seq int64, t time.Time) []byte {
	v := runner.StampValue(nil, t)
	v = strconv.AppendUint(v, run, 16)
	v = append(v, ':')
	v = strconv.AppendInt(v, int64(writer), 10)
	v = append(v, ':')
	v = strconv.AppendInt(v, seq, 10)
	v = append(v, '|')
	return append(v, filler...)
}

// parseFanoutSeq reads the writer and sequence number fanoutValue put in
// v, if v is from run.
func parseFanoutSeq(v []byte, run uint64) (writer int, seq int64, ok bool) {
	if _, ok := runner.ParseStamp(v); !ok {
		return 0, 0, false
	}
	rest := v[runner.StampLen:]
	field := func(sep byte) (string, bool) {
		i := bytes.IndexByte(rest, sep)
		if i <= 0 {
			return "", false
		}
		f := string(rest[:i])
		rest = rest[i+1:]
		return f, true
	}
	rs, ok1 := field(':')
	ws, ok2 := field(':')
	ss, ok3 := field('|')
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseUint(rs, 16, 64)
	k, err2 := strconv.Atoi(ws)
	s, err3 := strconv.ParseInt(ss, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || r != run || k < 0 || s < 1 {
		return 0, 0, false
	}
	return k, s, true
}

// seqRange is the sequence numbers lo..hi, both included.
type seqRange struct{ lo, hi int64 }

// seqCheck follows the sequence numbers one watcher receives. In order,
// each arrives once and is one more than the last. A number above the
// next expected one leaves a gap; one that later fills a gap arrived out
// of order; one already received (the last, or below it and in no gap)
// is a duplicate. Gaps still open at the end hold the missing numbers.
type seqCheck struct {
	last      int64 // highest received
	gaps      []seqRange
	delivered int64 // distinct numbers received
	dups      int64
	reorders  int64
}

func (c *seqCheck) see(s int64) {
	switch {
	case s > c.last:
		if s > c.last+1 {
			c.gaps = append(c.gaps, seqRange{c.last + 1, s - 1})
		}
		c.last = s
		c.delivered++
	case s == c.last:
		c.dups++
	default:
		i := slices.IndexFunc(c.gaps, func(g seqRange) bool { return g.lo <= s && s <= g.hi })
		if i < 0 {
			c.dups++
			return
		}
		g := c.gaps[i]
		c.gaps = slices.Delete(c.gaps, i, i+1)
		if g.lo < s {
			c.gaps = append(c.gaps, seqRange{g.lo, s - 1})
		}
		if s < g.hi {
			c.gaps = append(c.gaps, seqRange{s + 1, g.hi})
		}
		c.reorders++
		c.delivered++
	}
}

// checkResult sums the watchers' checks.
type checkResult struct{ missing, dups, reorders int64 }

func (r *checkResult) add(o checkResult) {
	r.missing += o.missing
	r.dups += o.dups
	r.reorders += o.reorders
}

// checkAll sums the checks; missing counts, per watcher, the acknowledged
// numbers (acked[s]; acked[0] unused) that are in a gap or above the last
// it received. A number whose put failed is never missing: it may not
// have been applied. A number beyond acked (an error in the watch path)
// is neither.
func checkAll(checks []seqCheck, acked []bool) checkResult {
	// upTo[s] is the number of acknowledged sequence numbers <= s.
	upTo := make([]int64, len(acked))
	for s := 1; s < len(acked); s++ {
		upTo[s] = upTo[s-1]
		if acked[s] {
			upTo[s]++
		}
	}
	count := func(lo, hi int64) int64 {
		hi = min(hi, int64(len(acked)-1))
		if lo > hi {
			return 0
		}
		return upTo[hi] - upTo[lo-1]
	}
	var r checkResult
	for i := range checks {
		c := &checks[i]
		r.dups += c.dups
		r.reorders += c.reorders
		for _, g := range c.gaps {
			r.missing += count(g.lo, g.hi)
		}
		r.missing += count(c.last+1, int64(len(acked)-1))
	}
	return r
}

// errFanoutAnomalies is returned by the CLI when a watch-fanout run saw
// missing, duplicate, out-of-order or foreign events (values not from
// this run's writer: another run writing under the same prefix).
var errFanoutAnomalies = errors.New("watch-fanout: anomalies seen")

// FanoutAnomalies returns an error if res is a watch-fanout result with
// anomalies, so a script running the benchmark fails on them.
func FanoutAnomalies(res *Result) error {
	if res == nil || res.Workload != "watch-fanout" {
		return nil
	}
	e := res.Extra
	if n := e["anomalies"]; n > 0 {
		return fmt.Errorf("%w: %d (missing %d, duplicate %d, out of order %d, foreign %d, cancelled watches %d)", errFanoutAnomalies,
			int64(n), int64(e["missing"]), int64(e["duplicate"]), int64(e["out_of_order"]), int64(e["foreign_events"]), int64(e["watches_canceled"]))
	}
	return nil
}
