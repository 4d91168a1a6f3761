package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

func init() {
	Register("lease-keepalive", "grants --keys leases, then each client renews its share over one KeepAlive stream; an op is one keep-alive sent and acknowledged", func() Workload { return &leaseKAWorkload{} })
}

// leaseKATTLMs is the TTL of the benchmark's leases: long enough that a
// rate-limited run does not lose any; Finish revokes them.
const leaseKATTLMs = 600_000

type leaseKAWorkload struct {
	ids []int64
	// acked counts keep-alive results received for existing leases, on
	// every stream, independently of the op loop.
	acked atomic.Int64
}

// Setup grants Keys leases with up to 64 concurrent grants.
func (w *leaseKAWorkload) Setup(ctx context.Context, env *Env) error {
	n := env.Opts.Keys
	if env.Opts.Progress != nil {
		fmt.Fprintf(env.Opts.Progress, "granting %d leases\n", n)
	}
	w.ids = make([]int64, n)
	return fanOut(ctx, n, 64, true, func(c int) func(context.Context, int) error {
		lc := dkvpb.NewLeaseClient(env.WriteConn(c))
		return func(ctx context.Context, j int) error {
			gctx, cancel := opContext(ctx, env.Opts.OpTimeout)
			defer cancel()
			g, err := lc.Grant(gctx, &dkvpb.LeaseGrantRequest{TtlMs: leaseKATTLMs})
			if err != nil {
				return fmt.Errorf("granting lease %d: %w", j, err)
			}
			w.ids[j] = g.Id
			return nil
		}
	})
}

// share is client i's leases: every clients-th one from i, or, with more
// clients than leases, lease i mod n.
func (w *leaseKAWorkload) share(i, clients int) []int64 {
	if clients >= len(w.ids) {
		return []int64{w.ids[i%len(w.ids)]}
	}
	var s []int64
	for j := i; j < len(w.ids); j += clients {
		s = append(s, w.ids[j])
	}
	return s
}

func (w *leaseKAWorkload) NewWorker(i int, env *Env) (Worker, error) {
	// A keep-alive stream's every renewal is a proposal on the leader:
	// WriteConn, as the Go client opens its keep-alive stream.
	return &kaWorker{conn: env.WriteConn(i), ids: w.share(i, env.Opts.Clients), acked: &w.acked}, nil
}

// Finish checks nothing was lost, reports the acknowledgment count and
// revokes the leases.
func (w *leaseKAWorkload) Finish(ctx context.Context, env *Env, res *Result) error {
	if res.Extra == nil {
		res.Extra = map[string]float64{}
	}
	res.Extra["leases"] = float64(len(w.ids))
	res.Extra["acked"] = float64(w.acked.Load())
	return revokeAll(ctx, env, w.ids)
}

func revokeAll(ctx context.Context, env *Env, ids []int64) error {
	return fanOut(ctx, len(ids), 64, false, func(c int) func(context.Context, int) error {
		lc := dkvpb.NewLeaseClient(env.WriteConn(c))
		return func(ctx context.Context, j int) error {
			rctx, cancel := opContext(ctx, env.Opts.OpTimeout)
			defer cancel()
			_, err := lc.Revoke(rctx, &dkvpb.LeaseRevokeRequest{Id: ids[j]})
			if err != nil && dkverr.CodeOf(err) != dkverr.LeaseNotFound {
				return fmt.Errorf("revoking lease %d: %w", ids[j], err)
			}
			return nil
		}
	})
}

// kaWorker renews its leases one at a time, round-robin, over one
// KeepAlive stream, reopened after a failure.
type kaWorker struct {
	conn  *grpc.ClientConn
	ids   []int64
	next  int
	acked *atomic.Int64

	st     dkvpb.Lease_KeepAliveClient
	cancel context.CancelFunc
	resps  chan *dkvpb.LeaseKeepAliveResponse
	errc   chan error
}

func (w *kaWorker) open() error {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := dkvpb.NewLeaseClient(w.conn).KeepAlive(ctx)
	if err != nil {
		cancel()
		return err
	}
	resps, errc := make(chan *dkvpb.LeaseKeepAliveResponse, 1), make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				errc <- err
				return
			}
			for _, r := range resp.GetResults() {
				if !r.GetNotFound() && r.GetTtlMs() > 0 {
					w.acked.Add(1)
				}
			}
			select {
			case resps <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	w.st, w.cancel, w.resps, w.errc = st, cancel, resps, errc
	return nil
}

// reset drops the stream; the next op opens a new one. An answer still
// in flight on the old stream can no longer be taken for a later op's.
func (w *kaWorker) reset() {
	if w.cancel != nil {
		w.cancel()
	}
	w.st, w.cancel = nil, nil
}

func (w *kaWorker) Op(ctx context.Context) error {
	if w.st == nil {
		if err := w.open(); err != nil {
			return err
		}
	}
	id := w.ids[w.next]
	w.next = (w.next + 1) % len(w.ids)
	if err := w.st.Send(&dkvpb.LeaseKeepAliveRequest{Ids: []int64{id}}); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream broke; its error is what Recv got.
			select {
			case err = <-w.errc:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		w.reset()
		return err
	}
	for {
		select {
		case resp := <-w.resps:
			for _, r := range resp.GetResults() {
				if r.GetId() != id {
					continue
				}
				if r.GetNotFound() || r.GetTtlMs() <= 0 {
					return dkverr.New(dkverr.LeaseNotFound, "lease %d not found", id)
				}
				return nil
			}
		case err := <-w.errc:
			w.reset()
			return err
		case <-ctx.Done():
			w.reset()
			return ctx.Err()
		}
	}
}

func (w *kaWorker) Close() error {
	if w.st != nil {
		_ = w.st.CloseSend()
	}
	w.reset()
	return nil
}
