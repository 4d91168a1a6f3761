package bench

import (
	"context"
	"fmt"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

func init() {
	Register("lock", "one acquire (waiting in the queue if held) + release of the lock on a random key per op; --keys 1 is one contended lock", func() Workload { return lockWorkload{} })
}

// lockLeaseTTLMs is the TTL of each client's lease; the worker revokes it
// when the run ends. Runs longer than this would see locks expire.
const lockLeaseTTLMs = 3_600_000

type lockWorkload struct{}

func (lockWorkload) Setup(context.Context, *Env) error { return nil }

type lockWorker struct {
	lease dkvpb.LeaseClient
	lock  dkvpb.LockClient
	id    int64
	owner string
	n     int
	key   func() []byte
}

func (lockWorkload) NewWorker(i int, env *Env) (Worker, error) {
	w := &lockWorker{lease: dkvpb.NewLeaseClient(env.WriteConn(i)), lock: dkvpb.NewLockClient(env.WriteConn(i)), owner: fmt.Sprintf("bench-%d-%d", env.Opts.Seed, i)}
	ctx, cancel := opContext(context.Background(), env.Opts.OpTimeout)
	defer cancel()
	g, err := w.lease.Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: lockLeaseTTLMs})
	if err != nil {
		return nil, fmt.Errorf("granting client %d's lease: %w", i, err)
	}
	w.id = g.Id
	r := env.Rand(i)
	w.key = func() []byte { return env.Key(r.IntN(env.Opts.Keys)) }
	return w, nil
}

func (w *lockWorker) Op(ctx context.Context) error {
	w.n++
	resp, err := w.lock.Acquire(ctx, &dkvpb.LockAcquireRequest{Key: w.key(), Lease: w.id, Owner: fmt.Sprintf("%s-%d", w.owner, w.n), Wait: true})
	if err != nil {
		return err
	}
	_, err = w.lock.Release(ctx, &dkvpb.LockReleaseRequest{Handle: resp.Handle})
	return err
}

// Close revokes the client's lease, releasing anything it still holds.
func (w *lockWorker) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := w.lease.Revoke(ctx, &dkvpb.LeaseRevokeRequest{Id: w.id})
	return err
}
