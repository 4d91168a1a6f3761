package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/bench/runner"
)

func init() {
	Register("watch", "--watchers watches on one prefix (multiplexed, one Watch stream per connection) while --clients writers put to it; an op is one put; reports delivered events/s and put→event latency in extra", func() Workload { return &watchWorkload{} })
}

// WatchPrefix is the prefix the watch workload watches and writes under.
func WatchPrefix(o *Options) string { return o.KeyPrefix + "watch/" }

// watchDrainIdle and watchDrainMax bound how long Finish waits for the
// events of the last puts: until none arrived for watchDrainIdle, at most
// watchDrainMax.
const (
	watchDrainIdle = 2 * time.Second
	watchDrainMax  = 15 * time.Second
)

type watchWorkload struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stats    []*runner.EventStats
	canceled atomic.Int64 // watches the server cancelled
	start    time.Time
}

// Setup opens one Watch stream per connection (fewer if there are fewer
// watchers), creates the watchers over them round-robin, and waits until
// every watch is created, so the writers' first put is seen by all.
func (w *watchWorkload) Setup(ctx context.Context, env *Env) error {
	n := env.Opts.Watchers
	prefix := []byte(WatchPrefix(env.Opts))
	streams := min(len(env.conns), max(n, 1))
	wctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	created := make(chan error, 2*n+streams) // never blocks: created, canceled per watch, one error per stream
	for s := range streams {
		if n == 0 {
			break
		}
		st, err := dkvpb.NewWatchClient(env.conns[s]).Watch(wctx)
		if err != nil {
			cancel()
			return fmt.Errorf("opening watch stream %d: %w", s, err)
		}
		stats := &runner.EventStats{}
		w.stats = append(w.stats, stats)
		for j := s; j < n; j += streams {
			err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{
				Key: prefix, Prefix: true, WatchId: int64(j + 1),
			}}})
			if err != nil {
				cancel()
				return fmt.Errorf("creating watch %d: %w", j+1, err)
			}
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				resp, err := st.Recv()
				if err != nil {
					created <- err // ignored once Setup returned
					return
				}
				now := time.Now()
				if ackCreate(resp, created) {
					w.canceled.Add(1)
				}
				for _, ev := range resp.GetEvents() {
					if ev.GetType() == dkvpb.Event_PUT {
						stats.Record(ev.GetKv().GetValue(), now)
					}
				}
			}
		}()
	}
	if err := awaitCreated(ctx, created, n, max(env.Opts.OpTimeout, 10*time.Second), nil); err != nil {
		cancel()
		return err
	}
	w.start = time.Now()
	return nil
}

// ackCreate passes a watch's created or cancelled response on to created,
// where Setup waits for one per watch, and says whether it was a cancel.
func ackCreate(resp *dkvpb.WatchResponse, created chan<- error) (canceled bool) {
	switch {
	case resp.GetCanceled():
		created <- fmt.Errorf("watch %d cancelled: %s %s", resp.GetWatchId(), resp.GetCancelStatus(), resp.GetCancelReason())
		return true
	case resp.GetCreated():
		created <- nil
	}
	return false
}

// awaitCreated waits for n answers on created, failing on the first error,
// after limit, or when ctx ends; progress (if not nil) is told how many
// arrived after each.
func awaitCreated(ctx context.Context, created <-chan error, n int, limit time.Duration, progress func(done int)) error {
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	for i := range n {
		select {
		case err := <-created:
			if err != nil {
				return err
			}
		case <-timeout.C:
			return fmt.Errorf("%d of %d watches created within %v", i, n, limit)
		case <-ctx.Done():
			return ctx.Err()
		}
		if progress != nil {
			progress(i + 1)
		}
	}
	return nil
}

// NewWorker is one writer: each op puts a value carrying its send time to
// a random key under the prefix.
func (w *watchWorkload) NewWorker(i int, env *Env) (Worker, error) {
	kv, r := env.WriteKV(i), env.Rand(i)
	filler := env.Value(r)
	prefix := WatchPrefix(env.Opts)
	return WorkerFunc(func(ctx context.Context) error {
		_, err := kv.Put(ctx, &dkvpb.PutRequest{Key: appendKey(nil, prefix, r.IntN(env.Opts.Keys)), Value: runner.StampValue(filler, time.Now())})
		return err
	}), nil
}

// Finish waits for the last events, stops the watches and puts the event
// metrics in res.Extra: events delivered vs expected (successful puts ×
// watchers), events/s and the put→event latency.
func (w *watchWorkload) Finish(ctx context.Context, env *Env, res *Result) error {
	expected := res.OK * int64(env.Opts.Watchers)
	runner.WaitEvents(ctx, w.stats, expected, watchDrainIdle, watchDrainMax)
	w.cancel()
	w.wg.Wait()
	runner.FillEventExtra(res, w.stats, w.start, env.Opts.Watchers, expected)
	if c := w.canceled.Load(); c > 0 {
		res.Extra["watches_canceled"] = float64(c)
	}
	return nil
}
