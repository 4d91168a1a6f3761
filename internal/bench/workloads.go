package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/bench/runner"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func init() {
	Register("put", "random keys over the key space, one put per op", func() Workload { return putWorkload{} })
	Register("get", "one linearizable (or --serializable) read of a random key per op; preloads the key space", func() Workload { return getWorkload{} })
	Register("mixed", "gets with probability --read-ratio, puts otherwise; preloads the key space", func() Workload { return mixedWorkload{} })
	Register("txn", "compare-and-swap: read a random key's version, then a txn that puts if the version is unchanged (a lost race counts as Conflict)", func() Workload { return txnWorkload{} })
	Register("counter", "atomic +1 on a random counter key under <prefix>counter/", func() Workload { return counterWorkload{} })
}

type putWorkload struct{}

func (putWorkload) Setup(context.Context, *Env) error { return nil }

func (putWorkload) NewWorker(i int, env *Env) (Worker, error) {
	kv, r := env.WriteKV(i), env.Rand(i)
	val := env.Value(r)
	sess := &workerSession{kv: kv, r: r}
	return WorkerFunc(func(ctx context.Context) error {
		ctx, err := sess.ctx(ctx, env.Opts.Sessions)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, &dkvpb.PutRequest{Key: env.Key(r.IntN(env.Opts.Keys)), Value: val})
		return err
	}), nil
}

type getWorkload struct{}

func (getWorkload) Setup(ctx context.Context, env *Env) error { return preload(ctx, env) }

func (getWorkload) NewWorker(i int, env *Env) (Worker, error) {
	kv, r := env.KV(i), env.Rand(i)
	return WorkerFunc(func(ctx context.Context) error {
		_, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: env.Key(r.IntN(env.Opts.Keys)), Serializable: env.Opts.Serializable})
		return err
	}), nil
}

type mixedWorkload struct{}

func (mixedWorkload) Setup(ctx context.Context, env *Env) error { return preload(ctx, env) }

func (mixedWorkload) NewWorker(i int, env *Env) (Worker, error) {
	kv, wkv, r := env.KV(i), env.WriteKV(i), env.Rand(i)
	val := env.Value(r)
	return WorkerFunc(func(ctx context.Context) error {
		key := env.Key(r.IntN(env.Opts.Keys))
		if r.Float64() < env.Opts.ReadRatio {
			_, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: key, Serializable: env.Opts.Serializable})
			return err
		}
		_, err := wkv.Put(ctx, &dkvpb.PutRequest{Key: key, Value: val})
		return err
	}), nil
}

// errCASLost is a txn op whose compare failed: another client wrote the
// key between the read and the txn.
var errCASLost = dkverr.New(dkverr.Conflict, "compare-and-swap lost the race")

type txnWorkload struct{}

func (txnWorkload) Setup(context.Context, *Env) error { return nil }

func (txnWorkload) NewWorker(i int, env *Env) (Worker, error) {
	kv, wkv, r := env.KV(i), env.WriteKV(i), env.Rand(i)
	val := env.Value(r)
	return WorkerFunc(func(ctx context.Context) error {
		key := env.Key(r.IntN(env.Opts.Keys))
		got, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: key, Serializable: env.Opts.Serializable})
		if err != nil {
			return err
		}
		var version int64 // 0: the key does not exist
		if len(got.Kvs) > 0 {
			version = got.Kvs[0].Version
		}
		resp, err := wkv.Txn(ctx, &dkvpb.TxnRequest{
			Compare: []*dkvpb.Compare{{
				Key:         key,
				Target:      dkvpb.Compare_VERSION,
				Result:      dkvpb.Compare_EQUAL,
				TargetUnion: &dkvpb.Compare_Version{Version: version},
			}},
			Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: key, Value: val}}}},
		})
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errCASLost
		}
		return nil
	}), nil
}

type counterWorkload struct{}

func (counterWorkload) Setup(context.Context, *Env) error { return nil }

// CounterPrefix is where the counter workload keeps its counters, apart
// from the put/get key space whose values are not integers.
func CounterPrefix(o *Options) string { return o.KeyPrefix + "counter/" }

func (counterWorkload) NewWorker(i int, env *Env) (Worker, error) {
	kv, r := env.WriteKV(i), env.Rand(i)
	prefix := CounterPrefix(env.Opts)
	sess := &workerSession{kv: kv, r: r}
	return WorkerFunc(func(ctx context.Context) error {
		ctx, err := sess.ctx(ctx, env.Opts.Sessions)
		if err != nil {
			return err
		}
		_, err = kv.Counter(ctx, &dkvpb.CounterRequest{Key: appendKey(nil, prefix, r.IntN(env.Opts.Keys)), Delta: 1})
		return err
	}), nil
}

// preload writes every key of the key space once, unless the space
// already holds that many keys, so reads find values of the configured
// size. It uses up to Clients concurrent writers.
func preload(ctx context.Context, env *Env) error {
	if env.Opts.NoPreload {
		return nil
	}
	kv := env.KV(0)
	// Counting millions of keys takes the server a while: a count gets
	// at least preloadCountTimeout, not one op's timeout.
	count := func(ctx context.Context, n int) (int64, error) {
		rctx, cancel := opContext(ctx, max(env.Opts.OpTimeout, preloadCountTimeout(n)))
		defer cancel()
		got, err := kv.Range(rctx, &dkvpb.RangeRequest{Key: env.Key(0), RangeEnd: env.Key(n), CountOnly: true})
		if err != nil {
			return 0, err
		}
		return got.Count, nil
	}
	got, err := count(ctx, env.Opts.Keys)
	if err != nil {
		return err
	}
	if got >= int64(env.Opts.Keys) {
		return nil
	}
	// Many puts per txn, so a large key space loads in minutes: batches
	// of preloadBatch keys, fewer when the values are large (a txn stays
	// within one request of about preloadBatchBytes).
	per := max(1, min(preloadBatch, preloadBatchBytes/max(1, env.Opts.ValueSize)))
	batches := (env.Opts.Keys + per - 1) / per
	from := 0
	if got > 0 {
		// A preload cut off earlier (its time bound, a failed member)
		// goes on from where it stopped rather than from the first key.
		from, err = runner.ResumeFrom(ctx, batches, per, func(ctx context.Context, k int) (bool, error) {
			rctx, cancel := opContext(ctx, env.Opts.OpTimeout)
			defer cancel()
			r, err := kv.Range(rctx, &dkvpb.RangeRequest{Key: env.Key(k), CountOnly: true})
			return err == nil && r.Count > 0, err
		}, count)
		if err != nil {
			return err
		}
	}
	if env.Opts.Progress != nil {
		fmt.Fprintf(env.Opts.Progress, "preloading %d keys (%d present; from key %d)\n", env.Opts.Keys, got, from*per)
	}
	return fanOut(ctx, batches-from, min(env.Opts.Clients, runner.PreloadWindow), true, func(w int) func(context.Context, int) error {
		kv, val := env.WriteKV(w), env.Value(env.Rand(w))
		return func(ctx context.Context, j int) error {
			j += from
			lo, hi := j*per, min((j+1)*per, env.Opts.Keys)
			txn := &dkvpb.TxnRequest{Success: make([]*dkvpb.RequestOp, 0, hi-lo)}
			for k := lo; k < hi; k++ {
				txn.Success = append(txn.Success, &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{
					RequestPut: &dkvpb.PutRequest{Key: env.Key(k), Value: val}}})
			}
			return preloadTxn(ctx, env.Opts.OpTimeout, func(ctx context.Context) error {
				_, err := kv.Txn(ctx, txn)
				return err
			})
		}
	})
}

// preloadTxn runs one preload txn, trying again when it may not have
// applied (the member was unavailable, the call timed out, or the leader
// changed under it): a preload puts fixed values, so applying one twice
// changes nothing the run measures, and a leader change during a
// minutes-long preload of millions of keys should not end the run.
func preloadTxn(ctx context.Context, timeout time.Duration, txn func(context.Context) error) error {
	var err error
	for attempt := 0; attempt < preloadAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		rctx, cancel := opContext(ctx, timeout)
		err = txn(rctx)
		cancel()
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded:
			if ctx.Err() == nil {
				continue
			}
		}
		return err
	}
	return fmt.Errorf("preload txn failed %d times: %w", preloadAttempts, err)
}

// The preload's txn size: within the server's default --max-txn-ops
// (128) and well within a request's size limit.
const (
	preloadBatch      = 100
	preloadBatchBytes = 512 << 10

	preloadAttempts = 5
)

// preloadCountTimeout bounds a count of n keys: two minutes, and more for
// a key space of millions (a count reads every latest record: 6.6M keys
// took 92 s on a loaded 3-node cluster).
func preloadCountTimeout(n int) time.Duration {
	return max(2*time.Minute, time.Duration(n/20_000)*time.Second)
}

// fanOut runs an operation for every j in [0, n) on up to workers
// goroutines; worker w makes its operation once with newOp(w) (to pick
// its connection). It returns the first error. With stopOnErr the first
// error also stops the rest; without, they carry on.
func fanOut(ctx context.Context, n, workers int, stopOnErr bool, newOp func(w int) func(ctx context.Context, j int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := newOp(w)
			for {
				j := int(next.Add(1)) - 1
				if j >= n || ctx.Err() != nil {
					return
				}
				if err := op(ctx, j); err != nil {
					errOnce.Do(func() {
						firstErr = err
						if stopOnErr {
							cancel()
						}
					})
					if stopOnErr {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

func opContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
