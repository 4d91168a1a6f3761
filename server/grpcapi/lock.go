package grpcapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lock"
	"github.com/dkv-io/dkv/internal/state"
	"google.golang.org/protobuf/proto"
)

// lockRecheckInterval is how often a waiting Acquire looks at the lock
// table in case it missed its grant's notification.
const lockRecheckInterval = 500 * time.Millisecond

// lockService implements dkvpb.LockServer (docs/locks.md). Every lock
// command is a proposal. A waiting Acquire blocks until this member
// applies its grant: the node wakes it (Node.WaitGrant), and it looks at
// the lock table now and then as a safety net (after a snapshot install,
// say). When the caller gives up, the node cancels the wait
// (Node.CancelLockWait).
type lockService struct {
	dkvpb.UnimplementedLockServer
	a *API
}

func randomOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (l *lockService) Acquire(ctx context.Context, req *dkvpb.LockAcquireRequest) (*dkvpb.LockAcquireResponse, error) {
	r := proto.Clone(req).(*dkvpb.LockAcquireRequest)
	if r.Owner == "" {
		r.Owner = randomOwner()
	}
	var granted <-chan *dkvpb.LockHandle
	if r.Wait {
		// Registered before proposing, so a grant applied at any point
		// after the enqueue is seen.
		var unregister func()
		granted, unregister = l.a.n.WaitGrant(r.Key, r.Owner)
		defer unregister()
	}
	// The enqueue is an ordinary proposal and gets the request timeout
	// (the interceptor exempts waits from it); only the wait for the
	// grant lasts as long as the caller's ctx.
	pctx, pcancel := context.WithTimeout(ctx, l.a.o.RequestTimeout)
	// The entry carries this member's clock: a grant records it as its
	// time (GET /v1/locks' granted_unix_ms); apply never reads a clock.
	resp, err := Propose[*dkvpb.LockAcquireResponse](pctx, l.a.n, &dkvpb.InternalRequest{TimeUnixNano: time.Now().UnixNano(), Request: &dkvpb.InternalRequest_LockAcquire{LockAcquire: r}})
	pcancel()
	if err != nil {
		if r.Wait && ctx.Err() != nil {
			// The caller gave up and the enqueue may have committed:
			// leave no waiter nobody waits for. A proposal lost with its
			// leader while the caller still waits is not cancelled: the
			// owner's retry finds the same place (cancelling here would
			// drop a place held since before this attempt), and a caller
			// that does not retry is cleared by its waiter's lease.
			l.a.n.CancelLockWait(r.Key, r.Owner)
		}
		return nil, err
	}
	if !resp.Acquired && resp.Queued {
		if resp, err = l.wait(ctx, r, resp, granted); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// wait blocks until r's queued acquisition is granted.
func (l *lockService) wait(ctx context.Context, r *dkvpb.LockAcquireRequest, resp *dkvpb.LockAcquireResponse, granted <-chan *dkvpb.LockHandle) (*dkvpb.LockAcquireResponse, error) {
	t := time.NewTicker(lockRecheckInterval)
	defer t.Stop()
	done := func(h *dkvpb.LockHandle) *dkvpb.LockAcquireResponse {
		resp.Acquired, resp.Queued, resp.Handle, resp.Holder = true, false, h, nil
		resp.Header = l.a.n.Header(0)
		return resp
	}
	for {
		select {
		case h := <-granted:
			return done(h), nil
		case <-t.C:
			h, held, queued, err := lockState(l.a.n.Applied(), r.Key, r.Owner)
			if err != nil {
				return nil, dkverr.New(dkverr.Internal, "%v", err)
			}
			if held && h.Owner == r.Owner {
				return done(&dkvpb.LockHandle{Key: h.Key, Owner: h.Owner, Lease: h.Lease, Token: h.Token}), nil
			}
			if !queued {
				// Neither holder nor waiter: the waiter's lease ended, or
				// its wait was cancelled. Say so rather than wait forever.
				return nil, dkverr.New(dkverr.LeaseNotFound, "waiting for lock %q ended: the waiter is no longer queued (lease %d revoked or expired, or the wait was cancelled)", r.Key, resp.Lease)
			}
		case <-ctx.Done():
			l.a.n.CancelLockWait(r.Key, r.Owner)
			return nil, ctx.Err()
		case <-l.a.n.Stopping():
			// The waiter stays queued: its client retries on another
			// member with the same owner and keeps its place (if the
			// client is gone too, its lease ends the wait).
			return nil, dkverr.New(dkverr.Unavailable, "member is stopping")
		}
	}
}

// lockRecheckHook, when a test sets it, runs in lockState between reading
// the holder and reading the queue.
var lockRecheckHook func()

// lockState reads key's holder and whether owner waits for it, from one
// snapshot: read from the live database, a grant applied between the two
// reads would show owner as neither holder nor waiter, and its Acquire
// would fail although it now holds the lock.
func lockState(st state.Reader, key []byte, owner string) (h lock.Holder, held, queued bool, err error) {
	snap := st.Snapshot()
	defer snap.Close()
	if h, held, err = snap.LockHolder(key); err != nil {
		return h, false, false, err
	}
	if lockRecheckHook != nil {
		lockRecheckHook()
	}
	_, queued, err = snap.LockWaiter(key, owner)
	return h, held, queued, err
}

func (l *lockService) Release(ctx context.Context, req *dkvpb.LockReleaseRequest) (*dkvpb.LockReleaseResponse, error) {
	// Stamped: a release hands the lock to the next waiter, whose grant
	// records the entry's time.
	return Propose[*dkvpb.LockReleaseResponse](ctx, l.a.n, &dkvpb.InternalRequest{TimeUnixNano: time.Now().UnixNano(), Request: &dkvpb.InternalRequest_LockRelease{LockRelease: req}})
}

func (l *lockService) Cancel(ctx context.Context, req *dkvpb.LockCancelRequest) (*dkvpb.LockCancelResponse, error) {
	return Propose[*dkvpb.LockCancelResponse](ctx, l.a.n, &dkvpb.InternalRequest{TimeUnixNano: time.Now().UnixNano(), Request: &dkvpb.InternalRequest_LockCancel{LockCancel: req}})
}

func (l *lockService) Describe(ctx context.Context, req *dkvpb.LockDescribeRequest) (*dkvpb.LockDescribeResponse, error) {
	if len(req.GetKey()) == 0 || len(req.GetKey()) > l.a.o.Limits.MaxKeyBytes {
		return nil, dkverr.New(dkverr.InvalidInput, "lock key is %d bytes; it must be 1 to %d", len(req.GetKey()), l.a.o.Limits.MaxKeyBytes)
	}
	if err := l.a.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	if err := l.a.n.Recheck(ctx, req); err != nil {
		return nil, err
	}
	snap := l.a.n.Applied().Snapshot()
	defer snap.Close()
	st, err := snap.DescribeLock(req.Key)
	if err != nil {
		return nil, dkverr.New(dkverr.Internal, "%v", err)
	}
	resp := &dkvpb.LockDescribeResponse{Held: st.Holder != nil, Holder: st.Holder, QueueLength: st.Queue, LastToken: st.LastToken}
	if st.Holder != nil {
		if rem, ok := l.a.n.LeaseRemaining(st.Holder.Lease); ok {
			resp.RemainingMs = rem.Milliseconds()
		}
	}
	resp.Header = l.a.n.Header(0)
	return resp, nil
}
