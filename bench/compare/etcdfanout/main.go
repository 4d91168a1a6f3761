// Command etcdfanout is `dkv bench watch-fanout` through the etcd v3 API:
// many watchers of one prefix, a few writers, and a check that every
// watcher got every acknowledged put once and in order. It speaks only
// go.etcd.io/etcd/client/v3, so one binary measures etcd members, `etcd
// grpc-proxy start` processes, DKV members (their etcd API) and `dkv
// proxy` processes alike (bench/proxy-fanout-etcd.sh runs it against
// each).
//
// --watchers watches on --prefix are spread round-robin over --conns
// clientv3 clients, each dialled to one of --endpoints in turn; clientv3
// carries all the watches of one client (and one context) on one gRPC
// Watch stream, so that is --conns streams of watchers/conns watches each,
// the shape dkv bench watch-fanout gives DKV's own API. Once every watch
// is created (it prints "all N watches created" on stderr, which the
// script waits for before it samples memory), --writers writers, each
// with its own client, put to their own key under the prefix at --rate
// puts/s in all for --duration; each value carries the send time (the
// stamp of internal/bench/runner), this run's id, the writer and its
// sequence number. Every watcher must receive, for each writer, every
// acknowledged number exactly once, in ascending order, with ascending
// revisions; the command exits 1 if any is missing, duplicated or out of
// order, if a watch is cancelled or compacted, or if a watch channel
// closes early.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

type config struct {
	endpoints  []string
	watchers   int
	conns      int
	writers    int
	rate       float64
	duration   time.Duration
	prefix     string
	valueSize  int
	opTimeout  time.Duration
	drainIdle  time.Duration
	drainMax   time.Duration
	jsonOut    string
	system     string
	createWait time.Duration
}

func main() {
	var c config
	var endpoints string
	flag.StringVar(&endpoints, "endpoints", "127.0.0.1:2379", "comma-separated etcd API endpoints (members or proxies), host:port; clients are dialled round-robin over them")
	flag.IntVar(&c.watchers, "watchers", 10000, "watches on the prefix")
	flag.IntVar(&c.conns, "conns", 100, "clientv3 clients (one gRPC connection and one Watch stream each) the watches are spread over")
	flag.IntVar(&c.writers, "writers", 4, "writers, each with its own client, putting to its own key under the prefix")
	flag.Float64Var(&c.rate, "rate", 10, "puts per second, all writers together")
	flag.DurationVar(&c.duration, "duration", 30*time.Second, "how long the writers write")
	flag.StringVar(&c.prefix, "prefix", "bench/fanout/", "the watched prefix")
	flag.IntVar(&c.valueSize, "value-size", 256, "value size in bytes (at least the stamp and sequence number)")
	flag.DurationVar(&c.opTimeout, "op-timeout", 10*time.Second, "timeout of one put")
	flag.DurationVar(&c.drainIdle, "drain-idle", 5*time.Second, "after the writers stop, give up waiting for the last events when none arrived for this long")
	flag.DurationVar(&c.drainMax, "drain-max", 60*time.Second, "after the writers stop, wait at most this long for the last events")
	flag.DurationVar(&c.createWait, "create-timeout", 0, "bound on creating every watch (default: 10s + 1s per 1,000 watches)")
	flag.StringVar(&c.jsonOut, "json", "", "also write the result (runner.Result with the check in extra) as JSON here")
	flag.StringVar(&c.system, "system", "etcd-api", "the system's name in the result")
	flag.Parse()
	c.endpoints = splitList(endpoints)
	if len(c.endpoints) == 0 || c.watchers < 1 || c.conns < 1 || c.writers < 1 || c.rate <= 0 || c.duration <= 0 {
		fmt.Fprintln(os.Stderr, "etcdfanout: -endpoints, -watchers, -conns, -writers, -rate and -duration must be set and positive")
		os.Exit(2)
	}
	if c.createWait == 0 {
		c.createWait = 10*time.Second + time.Duration(c.watchers/1000)*time.Second
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, c)
	if res != nil {
		printResult(c, res)
		if c.jsonOut != "" {
			if b, jerr := json.MarshalIndent(res, "", "  "); jerr == nil {
				jerr = os.WriteFile(c.jsonOut, append(b, '\n'), 0o644)
				if jerr != nil && err == nil {
					err = jerr
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdfanout:", err)
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// conn is one watching client: its watches' stream and the event stats
// they share (EventStats wants one recorder at a time, and a histogram
// per watch would be ~60 KB each).
type conn struct {
	cli   *clientv3.Client
	mu    sync.Mutex
	stats runner.EventStats
}

// watcher is what one watch received: checks[k] follows writer k's
// numbers, lastRev its last revision. Only its receiving goroutine
// touches it until the receivers have stopped.
type watcher struct {
	checks  []seqCheck
	lastRev int64
}

type fanout struct {
	c      config
	run    uint64
	conns  []*conn
	ws     []watcher
	cancel context.CancelFunc
	wg     sync.WaitGroup

	stopping  atomic.Bool
	canceled  atomic.Int64 // watches the server (or proxy) cancelled
	compacted atomic.Int64 // responses saying the watch's revision was compacted
	closed    atomic.Int64 // watch channels that closed before the end
	foreign   atomic.Int64 // events whose value is not this run's
	revBack   atomic.Int64 // events whose revision was not above the watcher's last
	errResp   atomic.Int64 // responses carrying an error (Err() != nil)
	firstErr  atomic.Value // string: the first such error, for the report

	// acked[k][s]: writer k's put s was acknowledged (acked[k][0] unused).
	mu    sync.Mutex
	acked [][]bool
}

func dial(ep string, timeout time.Duration) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{ep},
		DialTimeout: timeout,
		Logger:      zap.NewNop(),
	})
}

func run(ctx context.Context, c config) (*runner.Result, error) {
	f := &fanout{c: c, run: rand.Uint64() | 1}
	f.acked = make([][]bool, c.writers)
	for k := range f.acked {
		f.acked[k] = []bool{false}
	}
	f.ws = make([]watcher, c.watchers)
	for i := range f.ws {
		f.ws[i].checks = make([]seqCheck, c.writers)
	}
	begin := time.Now()
	conns := min(c.conns, c.watchers)
	f.conns = make([]*conn, conns)
	for i := range f.conns {
		cli, err := dial(c.endpoints[i%len(c.endpoints)], 10*time.Second)
		if err != nil {
			f.closeConns()
			return nil, fmt.Errorf("client %d (%s): %w", i, c.endpoints[i%len(c.endpoints)], err)
		}
		f.conns[i] = &conn{cli: cli}
	}
	defer f.closeConns()
	wctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	created := make(chan error, c.watchers)
	for j := range f.ws {
		cn := f.conns[j%conns]
		// One context for all of a client's watches: clientv3 puts the
		// watches of one client and context on one gRPC stream.
		ch := cn.cli.Watch(wctx, c.prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		f.wg.Add(1)
		go f.receive(ch, cn, &f.ws[j], created)
	}
	timeout := time.NewTimer(c.createWait)
	defer timeout.Stop()
	for n := 1; n <= c.watchers; n++ {
		select {
		case err := <-created:
			if err != nil {
				f.stop()
				return nil, fmt.Errorf("creating watches (%d created): %w", n-1, err)
			}
		case <-timeout.C:
			f.stop()
			return nil, fmt.Errorf("%d of %d watches created in %v", n-1, c.watchers, c.createWait)
		case <-ctx.Done():
			f.stop()
			return nil, ctx.Err()
		}
		if n%max(c.watchers/10, 1) == 0 && n != c.watchers {
			fmt.Fprintf(os.Stderr, "etcdfanout: %d/%d watches created (%.1fs)\n", n, c.watchers, time.Since(begin).Seconds())
		}
	}
	start := time.Now()
	createSecs := start.Sub(begin).Seconds()
	fmt.Fprintf(os.Stderr, "etcdfanout: all %d watches created (%.2fs)\n", c.watchers, createSecs)

	writers := make([]*clientv3.Client, c.writers)
	for k := range writers {
		cli, err := dial(c.endpoints[k%len(c.endpoints)], 10*time.Second)
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("writer %d: %w", k, err)
		}
		writers[k] = cli
		defer cli.Close()
	}
	res, err := runner.Run(ctx, runner.RunConfig{
		Workload: "watch-fanout",
		System:   c.system,
		Clients:  c.writers,
		Duration: c.duration,
		Rate:     c.rate,
		Progress: os.Stderr, ProgressInterval: 10 * time.Second,
	}, func(k int) (runner.Worker, error) {
		filler := make([]byte, c.valueSize)
		for i := range filler {
			filler[i] = 'a' + byte(i%26)
		}
		key := fmt.Sprintf("%sw%03d", c.prefix, k)
		var seq int64
		return runner.WorkerFunc(func(ctx context.Context) error {
			seq++
			octx, ocancel := context.WithTimeout(ctx, c.opTimeout)
			defer ocancel()
			_, err := writers[k].Put(octx, key, string(fanoutValue(filler, f.run, k, seq, time.Now())))
			f.mu.Lock()
			f.acked[k] = append(f.acked[k], err == nil)
			f.mu.Unlock()
			return err
		}), nil
	})
	if err != nil {
		f.stop()
		return res, err
	}
	return res, f.finish(ctx, res, start, createSecs)
}

// receive reads one watch's channel until it closes, checking each event.
func (f *fanout) receive(ch clientv3.WatchChan, cn *conn, w *watcher, created chan<- error) {
	defer f.wg.Done()
	first := true
	for resp := range ch {
		now := time.Now()
		if first && resp.Created {
			first = false
			created <- nil
		}
		if resp.Canceled {
			f.canceled.Add(1)
		}
		if resp.CompactRevision != 0 {
			f.compacted.Add(1)
		}
		if err := resp.Err(); err != nil {
			f.errResp.Add(1)
			f.firstErr.CompareAndSwap(nil, err.Error())
			if first {
				first = false
				created <- fmt.Errorf("watch not created: %w", err)
			}
		}
		if len(resp.Events) == 0 {
			continue
		}
		cn.mu.Lock()
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			k, s, ok := parseFanoutSeq(ev.Kv.Value, f.run)
			if !ok || k >= len(w.checks) {
				f.foreign.Add(1)
				continue
			}
			w.checks[k].see(s)
			if rev := ev.Kv.ModRevision; rev <= w.lastRev {
				f.revBack.Add(1)
			} else {
				w.lastRev = rev
			}
			cn.stats.Record(ev.Kv.Value, now)
		}
		cn.mu.Unlock()
	}
	if first {
		created <- errors.New("watch channel closed before the watch was created")
	}
	if !f.stopping.Load() {
		f.closed.Add(1)
	}
}

func (f *fanout) stop() {
	f.stopping.Store(true)
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
}

func (f *fanout) closeConns() {
	for _, cn := range f.conns {
		if cn != nil {
			cn.cli.Close()
		}
	}
}

func (f *fanout) stats() []*runner.EventStats {
	s := make([]*runner.EventStats, len(f.conns))
	for i, cn := range f.conns {
		s[i] = &cn.stats
	}
	return s
}

// finish waits for the last events, stops the watches and fills
// res.Extra with the events, their latency and the check.
func (f *fanout) finish(ctx context.Context, res *runner.Result, start time.Time, createSecs float64) error {
	f.mu.Lock()
	acked := make([][]bool, len(f.acked))
	for k := range acked {
		acked[k] = append([]bool(nil), f.acked[k]...)
	}
	f.mu.Unlock()
	var nAcked, nPuts int64
	for _, a := range acked {
		nPuts += int64(len(a) - 1)
		for _, ok := range a {
			if ok {
				nAcked++
			}
		}
	}
	expected := nAcked * int64(len(f.ws))
	runner.WaitEvents(ctx, f.stats(), expected, f.c.drainIdle, f.c.drainMax)
	f.stop()
	runner.FillEventExtra(res, f.stats(), start, len(f.ws), expected)
	var r checkResult
	for k := range acked {
		checks := make([]seqCheck, len(f.ws))
		for i := range f.ws {
			checks[i] = f.ws[i].checks[k]
		}
		r.add(checkAll(checks, acked[k]))
	}
	e := res.Extra
	e["watch_conns"] = float64(len(f.conns))
	e["create_seconds"] = createSecs
	e["puts_acked"] = float64(nAcked)
	e["puts_unknown"] = float64(nPuts - nAcked)
	e["missing"] = float64(r.missing)
	e["duplicate"] = float64(r.dups)
	e["out_of_order"] = float64(r.reorders)
	e["foreign_events"] = float64(f.foreign.Load())
	e["watches_canceled"] = float64(f.canceled.Load())
	e["compacted"] = float64(f.compacted.Load())
	e["error_responses"] = float64(f.errResp.Load())
	e["channels_closed_early"] = float64(f.closed.Load())
	e["revision_not_increasing"] = float64(f.revBack.Load())
	anomalies := r.missing + r.dups + r.reorders + f.foreign.Load() + f.canceled.Load() +
		f.compacted.Load() + f.closed.Load() + f.revBack.Load()
	e["anomalies"] = float64(anomalies)
	if anomalies > 0 {
		msg := fmt.Sprintf("anomalies seen: %d (missing %d, duplicate %d, out of order %d, revision not increasing %d, foreign %d, cancelled %d, compacted %d, channels closed early %d)",
			anomalies, r.missing, r.dups, r.reorders, f.revBack.Load(), f.foreign.Load(), f.canceled.Load(), f.compacted.Load(), f.closed.Load())
		if s, ok := f.firstErr.Load().(string); ok {
			msg += "; first watch error: " + s
		}
		return errors.New(msg)
	}
	return nil
}

func printResult(c config, res *runner.Result) {
	e := res.Extra
	fmt.Printf("etcdfanout %s: %d watchers over %d clients, %d writers at %g puts/s for %v, endpoints %s\n",
		res.System, c.watchers, c.conns, c.writers, c.rate, c.duration, strings.Join(c.endpoints, ","))
	var errs []string
	for k, v := range res.Errors {
		errs = append(errs, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(errs)
	fmt.Printf("puts: %d acked (%.2f/s), errors [%s]; put latency p50 %.1f ms, p99 %.1f ms\n",
		res.OK, res.OpsPerSec, strings.Join(errs, ", "), msOf(res.Latency.P50), msOf(res.Latency.P99))
	if e == nil {
		return
	}
	fmt.Printf("watches created in %.2f s\n", e["create_seconds"])
	fmt.Printf("events: %.0f of %.0f expected, %.0f/s\n", e["events"], e["expected_events"], e["events_per_sec"])
	fmt.Printf("put->event: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		e["event_p50_ms"], e["event_p90_ms"], e["event_p99_ms"], e["event_max_ms"])
	fmt.Printf("check: missing %.0f, duplicate %.0f, out of order %.0f, revision not increasing %.0f, foreign %.0f, cancelled %.0f, compacted %.0f, channels closed early %.0f, error responses %.0f -> anomalies %.0f\n",
		e["missing"], e["duplicate"], e["out_of_order"], e["revision_not_increasing"], e["foreign_events"],
		e["watches_canceled"], e["compacted"], e["channels_closed_early"], e["error_responses"], e["anomalies"])
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
