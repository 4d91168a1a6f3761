package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

// etcdOpTimeout bounds one op, like dkv bench's --op-timeout.
const etcdOpTimeout = 10 * time.Second

// closerWorker is a Worker with cleanup, closed by the runner.
type closerWorker struct {
	op    func(ctx context.Context) error
	close func() error
}

func (w closerWorker) Op(ctx context.Context) error { return w.op(ctx) }
func (w closerWorker) Close() error                 { return w.close() }

func newEtcdWorkload(ctx context.Context, w workload, c config, clients []*clientv3.Client, seed uint64) (*sysWorkload, error) {
	nconns := len(clients)
	switch w.op {
	case "put", "get", "mixed":
		return &sysWorkload{newWorker: func(i int) (runner.Worker, error) {
			kv := clients[i%nconns]
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			val := value(r, c.valueSize)
			var opts []clientv3.OpOption
			if w.serializable {
				opts = append(opts, clientv3.WithSerializable())
			}
			return runner.WorkerFunc(func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
				defer cancel()
				k := keyIn(c.prefix, r.IntN(c.keys))
				put := w.op == "put"
				if w.op == "mixed" {
					// As dkv bench's mixed: a read with probability
					// --read-ratio, drawn after the key.
					put = r.Float64() >= c.readRatio
				}
				var err error
				if put {
					_, err = kv.Put(ctx, k, val)
				} else {
					_, err = kv.Get(ctx, k, opts...)
				}
				return err
			}), nil
		}}, nil
	case "lock":
		return etcdLock(c, clients, seed), nil
	case "watch":
		return etcdWatch(ctx, c, clients, seed)
	case "lease-keepalive":
		return etcdLeaseKeepAlive(ctx, w, c, clients)
	case "queue":
		return etcdQueue(ctx, w, c, clients, seed)
	}
	return nil, fmt.Errorf("no etcd equivalent of workload %q", w.op)
}

// etcdLock: each client holds one concurrency.Session (one lease, as dkv
// bench's lock workload grants one lease per client); an op is
// NewMutex(random key).Lock + Unlock.
func etcdLock(c config, clients []*clientv3.Client, seed uint64) *sysWorkload {
	return &sysWorkload{newWorker: func(i int) (runner.Worker, error) {
		sess, err := concurrency.NewSession(clients[i%len(clients)], concurrency.WithTTL(60))
		if err != nil {
			return nil, err
		}
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		return closerWorker{
			op: func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
				defer cancel()
				m := concurrency.NewMutex(sess, keyPrefix+"lock/"+key(r.IntN(c.keys))[len(keyPrefix):])
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			},
			close: sess.Close,
		}, nil
	}}
}

// etcdWatch: -watchers prefix watches spread over the clients (clientv3
// multiplexes the watches of one client and context on one gRPC stream,
// as dkv bench multiplexes them on one stream per connection), writers
// putting values stamped with their send time.
func etcdWatch(ctx context.Context, c config, clients []*clientv3.Client, seed uint64) (*sysWorkload, error) {
	prefix := keyPrefix + "watch/"
	wctx, cancel := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		stats    []*runner.EventStats
		canceled atomic.Int64
	)
	created := make(chan error, c.watchers)
	for j := range c.watchers {
		ch := clients[j%len(clients)].Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		st := &runner.EventStats{}
		stats = append(stats, st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for resp := range ch {
				now := time.Now()
				if first && resp.Created {
					first = false
					created <- nil
				}
				if resp.Canceled {
					canceled.Add(1)
					if first {
						first = false
						created <- fmt.Errorf("watch cancelled: %v", resp.Err())
					}
				}
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypePut {
						st.Record(ev.Kv.Value, now)
					}
				}
			}
			if first {
				created <- errors.New("watch closed before it was created")
			}
		}()
	}
	// Creating watches takes longer the more there are (the watchers
	// curve goes to 10,000): an op's time plus 1ms a watch.
	timeout := time.NewTimer(etcdOpTimeout + time.Duration(c.watchers)*time.Millisecond)
	defer timeout.Stop()
	for range c.watchers {
		select {
		case err := <-created:
			if err != nil {
				cancel()
				wg.Wait()
				return nil, err
			}
		case <-timeout.C:
			cancel()
			wg.Wait()
			return nil, errors.New("watches not created in time")
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return nil, ctx.Err()
		}
	}
	start := time.Now()
	return &sysWorkload{
		newWorker: func(i int) (runner.Worker, error) {
			kv := clients[i%len(clients)]
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			filler := []byte(value(r, c.valueSize))
			return runner.WorkerFunc(func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
				defer cancel()
				k := prefix + key(r.IntN(c.keys))[len(keyPrefix):]
				_, err := kv.Put(ctx, k, string(runner.StampValue(filler, time.Now())))
				return err
			}), nil
		},
		finish: func(ctx context.Context, res *runner.Result) error {
			finishWatch(ctx, res, stats, start, c.watchers, func() { cancel(); wg.Wait() })
			if n := canceled.Load(); n > 0 {
				res.Extra["watches_canceled"] = float64(n)
			}
			return nil
		},
	}, nil
}

// etcdLeaseKeepAlive: -leases leases, shared out among the clients; each
// client renews its share round-robin over its own LeaseKeepAlive stream
// (etcd's raw gRPC stream: clientv3's KeepAliveOnce opens a stream per
// call, which would not compare like with like). An op is one keep-alive
// sent and answered.
func etcdLeaseKeepAlive(ctx context.Context, w workload, c config, clients []*clientv3.Client) (*sysWorkload, error) {
	n := w.keys(c)
	fmt.Fprintf(os.Stderr, "granting %d leases\n", n)
	ids := make([]clientv3.LeaseID, n)
	if err := parallel(ctx, n, 64, func(i, j int) error {
		gctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		defer cancel()
		g, err := clients[i%len(clients)].Grant(gctx, 600)
		if err == nil {
			ids[j] = g.ID
		}
		return err
	}); err != nil {
		return nil, err
	}
	clientsN, _ := w.params(c)
	share := func(i int) []clientv3.LeaseID {
		if clientsN >= n {
			return []clientv3.LeaseID{ids[i%n]}
		}
		var s []clientv3.LeaseID
		for j := i; j < n; j += clientsN {
			s = append(s, ids[j])
		}
		return s
	}
	return &sysWorkload{
		newWorker: func(i int) (runner.Worker, error) {
			lc := pb.NewLeaseClient(clients[i%len(clients)].ActiveConnection())
			mine, next := share(i), 0
			var (
				st     pb.Lease_LeaseKeepAliveClient
				cancel context.CancelFunc
			)
			reset := func() {
				if cancel != nil {
					cancel()
				}
				st, cancel = nil, nil
			}
			return closerWorker{
				op: func(ctx context.Context) error {
					if st == nil {
						sctx, c := context.WithCancel(context.Background())
						s, err := lc.LeaseKeepAlive(sctx)
						if err != nil {
							c()
							return err
						}
						st, cancel = s, c
					}
					id := mine[next]
					next = (next + 1) % len(mine)
					if err := st.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
						reset()
						return err
					}
					// An op timeout cancels the stream, which ends Recv.
					ctx, ocancel := context.WithTimeout(ctx, etcdOpTimeout)
					defer ocancel()
					stop := context.AfterFunc(ctx, cancel)
					resp, err := st.Recv()
					if !stop() {
						reset()
						if err == nil {
							err = ctx.Err()
						}
					}
					if err != nil {
						reset()
						return err
					}
					if resp.ID != int64(id) || resp.TTL <= 0 {
						return fmt.Errorf("lease %x not found (answer for %x, ttl %d)", id, resp.ID, resp.TTL)
					}
					return nil
				},
				close: func() error {
					if st != nil {
						_ = st.CloseSend()
					}
					reset()
					return nil
				},
			}, nil
		},
		finish: func(ctx context.Context, res *runner.Result) error {
			if res.Extra == nil {
				res.Extra = map[string]float64{}
			}
			res.Extra["leases"] = float64(n)
			return parallel(ctx, n, 64, func(i, j int) error {
				rctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
				defer cancel()
				_, err := clients[i%len(clients)].Revoke(rctx, ids[j])
				return err
			})
		},
	}, nil
}
