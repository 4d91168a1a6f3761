// Command react shows reacting to changes with a watch instead of polling.
//
// A writer makes a series of changes under one prefix: new jobs (jobs/...)
// and edits of configuration entries (config/...). Two consumers follow
// them and do the same work:
//
//   - watch: workers pick up new jobs from a watch-backed cache of jobs/,
//     and a local configuration cache is kept current (each edited entry
//     replaced, never stale) from a watch of config/. No polling loop:
//     the store pushes each change.
//   - poll: a loop lists jobs/ and config/ every --poll (1s) and diffs the
//     result against what it saw before.
//
// Each change is made after a random pause (seeded) and only once both
// consumers reacted to the previous one, so every change is timed on its
// own. Halfway, both watches are cut (as a lost connection would cut
// them): they resume after the last revision they delivered, and no
// change is lost or seen twice. The program prints each change's change-to-reaction latency for
// both, then the median, the p99 and the number of reads each made.
//
// With --instance NAME the process is one consumer of its own (see
// instance.go): it reacts to every change under examples/react/RUN/data/
// by a watch, and keeps the last revision it handled in the store, so
// that after a restart, even after kill -9, it resumes from there + 1,
// without missing or repeating a change.
//
//	go run ./examples/react
//	go run ./examples/react --endpoints 127.0.0.1:17861,127.0.0.1:17871,127.0.0.1:17881
//	go run ./examples/react --endpoints ... --instance r1
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	var o options
	flag.IntVar(&o.changes, "changes", 20, "how many changes the writer makes (each takes about --poll)")
	flag.DurationVar(&o.poll, "poll", time.Second, "the polling loop's interval")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the pauses between changes")
	flag.IntVar(&o.cutAt, "cut-at", 10, "cut the watches (as a lost connection would) just before this change; 0: never")
	exenv.MainInstances(func(ctx context.Context, env *exenv.Env) error {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(o.changes+5)*(o.poll+5*time.Second))
		defer cancel()
		o.cutAt--
		o.prefix, o.out = "examples/react/"+env.Run+"/", os.Stdout
		_, err := run(ctx, env.Client, o)
		return err
	}, runConsumer)
}

type options struct {
	changes int
	poll    time.Duration
	seed    uint64
	cutAt   int    // before this change (from 0) every watch is cut; -1: never
	prefix  string // the keys of this run
	out     io.Writer
}

// The two approaches, as indexes.
const (
	watch = iota
	poll
)

var approachName = [2]string{"watch", "poll"}

// result is what a run measured.
type result struct {
	// latency[a][i] is approach a's change-to-reaction latency for change
	// i; reactions[a][i] how many times it reacted to change i.
	latency   [2][]time.Duration
	reactions [2][]int
	// reads[a] is the number of reads approach a made: for the watch,
	// each watch opened (a snapshot, or a resume after a cut), for the
	// poll, each list.
	reads [2]int64
}

// tracker records reactions. A change's value is its index.
type tracker struct {
	mu     sync.Mutex
	start  []time.Time // when each change was written (just before the put)
	res    *result
	notify chan struct{}
}

func (t *tracker) react(a int, kv *client.KeyValue) {
	i, err := strconv.Atoi(string(kv.Value))
	t.mu.Lock()
	if err == nil && i >= 0 && i < len(t.start) && !t.start[i].IsZero() {
		if t.res.reactions[a][i]++; t.res.reactions[a][i] == 1 {
			t.res.latency[a][i] = time.Since(t.start[i])
		}
	}
	t.mu.Unlock()
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

func (t *tracker) reactedByBoth(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.res.reactions[watch][i] > 0 && t.res.reactions[poll][i] > 0
}

// countingWatcher counts the watches opened through it: a new one reads a
// snapshot, a resumed one starts after the last revision delivered; after
// that the store pushes the changes. cut ends every open watch, as a lost
// connection or a restarted member would.
type countingWatcher struct {
	client.Watcher
	n atomic.Int64

	mu      sync.Mutex
	cancels []context.CancelFunc
	gate    chan struct{} // while cut: closed when watches may reopen
	waiting chan struct{} // while cut: a send per watch trying to reopen
}

func (w *countingWatcher) open(ctx context.Context) context.Context {
	w.mu.Lock()
	gate, waiting := w.gate, w.waiting
	w.mu.Unlock()
	if gate != nil { // still cut off
		select {
		case waiting <- struct{}{}:
		case <-ctx.Done():
		}
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	w.n.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	w.mu.Lock()
	w.cancels = append(w.cancels, cancel)
	w.mu.Unlock()
	return ctx
}

// cut ends every open watch and keeps them from reopening until the
// returned function is called. It returns once each watch has ended and
// its consumer is trying to reopen it, so what happens next happens while
// they are down.
func (w *countingWatcher) cut(ctx context.Context) (reconnect func()) {
	w.mu.Lock()
	n := len(w.cancels)
	for _, cancel := range w.cancels {
		cancel()
	}
	w.cancels = nil
	gate, waiting := make(chan struct{}), make(chan struct{})
	w.gate, w.waiting = gate, waiting
	w.mu.Unlock()
	for range n {
		select {
		case <-waiting:
		case <-ctx.Done():
		}
	}
	return func() {
		w.mu.Lock()
		w.gate = nil
		w.mu.Unlock()
		close(gate)
	}
}

func (w *countingWatcher) WatchPrefix(ctx context.Context, prefix string, opts ...client.WatchOption) (*client.Watch, error) {
	return w.Watcher.WatchPrefix(w.open(ctx), prefix, opts...)
}

func (w *countingWatcher) WatchKey(ctx context.Context, key string, opts ...client.WatchOption) (*client.Watch, error) {
	return w.Watcher.WatchKey(w.open(ctx), key, opts...)
}

func run(ctx context.Context, c *client.Client, o options) (*result, error) {
	res := &result{}
	for a := range res.latency {
		res.latency[a] = make([]time.Duration, o.changes)
		res.reactions[a] = make([]int, o.changes)
	}
	t := &tracker{start: make([]time.Time, o.changes), res: res, notify: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs, config := o.prefix+"jobs/", o.prefix+"config/"

	// The watch approach: two watch-backed caches. A worker picks up a
	// job in OnAdd; the configuration cache is the Cache itself (an
	// edited entry is replaced in memory when the edit arrives).
	cw := &countingWatcher{Watcher: c}
	jobCache, err := recipe.NewCache(ctx, cw, jobs, recipe.WithCacheHandler(recipe.CacheHandler{
		OnAdd: func(kv *client.KeyValue) { t.react(watch, kv) },
	}))
	if err != nil {
		return nil, err
	}
	defer jobCache.Close()
	configCache, err := recipe.NewCache(ctx, cw, config, recipe.WithCacheHandler(recipe.CacheHandler{
		OnAdd:    func(kv *client.KeyValue) { t.react(watch, kv) },
		OnUpdate: func(_, kv *client.KeyValue) { t.react(watch, kv) },
	}))
	if err != nil {
		return nil, err
	}
	defer configCache.Close()

	// The poll approach: list both prefixes every o.poll and react to
	// every key whose revision is newer than the last one seen.
	var pollReads atomic.Int64
	pollDone := make(chan struct{})
	pctx, stopPoll := context.WithCancel(ctx)
	go func() {
		defer close(pollDone)
		seen := map[string]int64{}
		tick := time.NewTicker(o.poll)
		defer tick.Stop()
		for {
			for _, p := range []string{jobs, config} {
				pollReads.Add(1)
				rr, err := c.List(pctx, p)
				if err != nil {
					continue // the next tick tries again
				}
				for _, kv := range rr.KVs {
					if kv.ModRevision > seen[kv.Key] {
						seen[kv.Key] = kv.ModRevision
						t.react(poll, kv)
					}
				}
			}
			select {
			case <-tick.C:
			case <-pctx.Done():
				return
			}
		}
	}()

	fmt.Fprintf(o.out, "%d changes, each after a random pause of up to %v; the poll loop lists every %v\n\n", o.changes, o.poll, o.poll)
	fmt.Fprintf(o.out, "  %-28s %10s %10s\n", "change", "watch", "poll")
	settings := []string{"timeout", "theme", "page-size"}
	rng := rand.New(rand.NewPCG(o.seed, o.seed))
	for i := range o.changes {
		pause := time.NewTimer(time.Duration(rng.Int64N(int64(o.poll))))
		select {
		case <-pause.C:
		case <-ctx.Done():
			stopPoll()
			return nil, ctx.Err()
		}
		what, key := fmt.Sprintf("new job job-%02d", i), jobs+fmt.Sprintf("job-%02d", i)
		if i%2 == 1 {
			s := settings[(i/2)%len(settings)]
			what, key = "edit config "+s, config+s
		}
		reconnect := func() {}
		if i == o.cutAt {
			reconnect = cw.cut(ctx)
			fmt.Fprintf(o.out, "  -- both watches are cut; the next change is made while they are down; they resume after the last revision they delivered\n")
		}
		t.mu.Lock()
		t.start[i] = time.Now()
		t.mu.Unlock()
		_, err := c.Put(ctx, key, []byte(strconv.Itoa(i)))
		reconnect()
		if err != nil {
			stopPoll()
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
		for !t.reactedByBoth(i) {
			select {
			case <-t.notify:
			case <-ctx.Done():
				stopPoll()
				return nil, fmt.Errorf("change %d (%s) not reacted to by both: %w", i, what, ctx.Err())
			}
		}
		t.mu.Lock()
		fmt.Fprintf(o.out, "  %2d %-25s %10v %10v\n", i+1, what, round(res.latency[watch][i]), round(res.latency[poll][i]))
		t.mu.Unlock()
	}
	stopPoll()
	<-pollDone
	res.reads = [2]int64{cw.n.Load(), pollReads.Load()}

	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(o.out, "\n  %-16s %10s %10s %8s\n", "approach", "median", "p99", "reads")
	for a := range 2 {
		name := approachName[a]
		if a == poll {
			name = fmt.Sprintf("poll every %v", o.poll)
		}
		fmt.Fprintf(o.out, "  %-16s %10v %10v %8d\n", name, round(percentile(res.latency[a], 50)), round(percentile(res.latency[a], 99)), res.reads[a])
	}
	cut := ""
	if o.cutAt >= 0 && o.cutAt < o.changes {
		cut = ", and opened it once more after the cut"
	}
	fmt.Fprintf(o.out, "\nThe watch read each prefix once (its snapshot)%s; the store pushed every change.\n", cut)
	fmt.Fprintf(o.out, "The poll loop read both prefixes on every tick, changed or not, and saw a change only at the next tick.\n")
	return res, nil
}

// percentile is the nearest-rank p-th percentile.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100
	return s[max(rank, 1)-1]
}

func round(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}
