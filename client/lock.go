package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// LockHandle is one grant of a lock: the key, the owner that acquired it,
// the lease it lives on and its fencing token. Tokens are strictly
// increasing per key, so a handle with a larger token is a later holder.
// Writes made WithLock(h) are refused with ErrLocked once h is no longer
// the current holder (released, expired, superseded). String and
// ParseLockHandle turn it into an opaque string for the CLI or for passing
// between processes.
type LockHandle struct {
	Key   string
	Owner string
	Lease int64
	Token int64
}

const handlePrefix = "dkvlock1."

// String is the handle's opaque text form.
func (h LockHandle) String() string {
	b, _ := proto.Marshal(h.pb())
	return handlePrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseLockHandle parses the text form String makes (surrounding
// whitespace allowed); ErrInvalidInput otherwise.
func ParseLockHandle(s string) (LockHandle, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, handlePrefix) {
		return LockHandle{}, newError(ErrInvalidInput, "not a lock handle (it starts with %q): %.40q", handlePrefix, s)
	}
	b, err := base64.RawURLEncoding.DecodeString(s[len(handlePrefix):])
	var pb dkvpb.LockHandle
	if err == nil {
		err = proto.Unmarshal(b, &pb)
	}
	if err != nil || len(pb.Key) == 0 || pb.Token <= 0 {
		return LockHandle{}, newError(ErrInvalidInput, "malformed lock handle %.40q", s)
	}
	return handleFromPB(&pb), nil
}

func (h LockHandle) pb() *dkvpb.LockHandle {
	return &dkvpb.LockHandle{Key: []byte(h.Key), Owner: h.Owner, Lease: h.Lease, Token: h.Token}
}

func handleFromPB(p *dkvpb.LockHandle) LockHandle {
	return LockHandle{Key: string(p.GetKey()), Owner: p.GetOwner(), Lease: p.GetLease(), Token: p.GetToken()}
}

// LockHeld is a txn compare that holds while h is the current holder of
// its key's lock.
func LockHeld(h LockHandle) Cmp {
	return Cmp{Key: h.Key, Target: CmpLock, Result: Equal, Lock: &h}
}

// LockNotHeld is a txn compare that holds while h is not the current
// holder of its key's lock.
func LockNotHeld(h LockHandle) Cmp {
	return Cmp{Key: h.Key, Target: CmpLock, Result: NotEqual, Lock: &h}
}

// LockOption configures an acquisition.
type LockOption func(*lockConfig)

type lockConfig struct {
	lease int64
	owner string
}

// WithLockLease makes the lock live on an existing lease (a Session's)
// instead of a lease granted for it: the lock ends when that lease does.
// The ttl argument must then be 0.
func WithLockLease(id int64) LockOption { return func(c *lockConfig) { c.lease = id } }

// WithLockOwner names the acquisition (default: random). Reuse a name only
// to retry the same acquisition.
func WithLockOwner(owner string) LockOption { return func(c *lockConfig) { c.owner = owner } }

func newOwner() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (c *Client) lockClient() dkvpb.LockClient { return dkvpb.NewLockClient(c.cc) }

// LockResult is the outcome of TryAcquire.
type LockResult struct {
	// Acquired says whether the lock was granted; Handle is the grant.
	Acquired bool
	Handle   LockHandle
	// Holder is the current holder when the lock was not acquired.
	Holder *LockHandle
}

func (c *Client) lockRequest(key string, ttl time.Duration, opts []LockOption) (*dkvpb.LockAcquireRequest, error) {
	var cfg lockConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.lease != 0 && ttl != 0 {
		return nil, newError(ErrInvalidInput, "a lock on WithLockLease takes ttl 0 (its lease's TTL applies)")
	}
	if cfg.lease == 0 && ttl < time.Second {
		return nil, newError(ErrInvalidInput, "lock ttl %v: it must be between 1s and 1 year", ttl)
	}
	if cfg.owner == "" {
		cfg.owner = newOwner()
	}
	return &dkvpb.LockAcquireRequest{Key: []byte(key), Lease: cfg.lease, TtlMs: ttl.Milliseconds(), Owner: cfg.owner}, nil
}

// waitRetryAfter is how long a lock wait must have lasted before its
// failure (Unavailable) earns a fresh retry budget.
const waitRetryAfter = 5 * time.Second

func (c *Client) acquireRPC(ctx context.Context, req *dkvpb.LockAcquireRequest) (*dkvpb.LockAcquireResponse, error) {
	var resp *dkvpb.LockAcquireResponse
	// The owner makes a retry return the same grant or queue place, so it
	// is retried like a read.
	call := c.call
	if req.Wait {
		call = c.callWait // queued: silence is not a hang
	}
	rpc := func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.lockClient().Acquire(ctx, req, o...)
		return err
	}
	var err error
	for unknown := 0; ; {
		// A wait may last hours and outlive several members. One that
		// failed (Unavailable: its member stopped or died, and so did
		// the retries) after waiting a while gets a fresh retry budget:
		// the same owner finds its queue place again on whichever
		// member answers.
		start := time.Now()
		err = call(ctx, false, rpc)
		if err == nil || !req.Wait || ctx.Err() != nil {
			break
		}
		// A proposal of the wait (joining the queue, or finding the place
		// again) lost with its leader has an unknown outcome, which the
		// server reports as DeadlineExceeded while our ctx is alive; the
		// owner makes asking again safe, and giving up here would take
		// the place out of the queue (below).
		if (errors.Is(err, ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded)) && unknown < c.cfg.MaxRetries {
			unknown++
			continue
		}
		if !errors.Is(err, ErrUnavailable) || time.Since(start) < waitRetryAfter {
			break
		}
	}
	if err != nil && req.Wait {
		// The member we waited on may have died with us in its queue, or
		// granted the lock as we gave up: take the acquisition back so
		// nobody waits behind a caller that left.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.call(cctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
			_, err := c.lockClient().Cancel(ctx, &dkvpb.LockCancelRequest{Key: req.Key, Owner: req.Owner}, o...)
			return err
		})
		cancel()
	}
	return resp, err
}

// TryAcquire takes key's lock if it is free, without waiting. With a ttl
// the lock gets its own lease of that TTL: it is released ttl after the
// grant unless renewed (Renew, or KeepAlive on Handle.Lease). A held lock
// is a plain result (Acquired false, Holder set), not an error.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*LockResult, error) {
	req, err := c.lockRequest(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	resp, err := c.acquireRPC(ctx, req)
	if err != nil {
		return nil, err
	}
	r := &LockResult{Acquired: resp.GetAcquired()}
	if r.Acquired {
		r.Handle = handleFromPB(resp.GetHandle())
	} else if resp.GetHolder() != nil {
		h := handleFromPB(resp.GetHolder())
		r.Holder = &h
	}
	return r, nil
}

// Acquire takes key's lock, waiting in the key's FIFO queue until it is
// granted or ctx ends (the waiter then leaves the queue). Only ctx limits
// the wait: the server's request timeout does not apply to it, and a
// member that stops or dies meanwhile is retried elsewhere with the same
// queue place (docs/locks.md, "Long waits"). With a ttl the
// lock gets its own lease, kept alive while waiting; once granted it is
// released ttl later unless renewed (Renew, or KeepAlive on Handle.Lease).
// With WithLockLease the lock lives on that lease.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (LockHandle, error) {
	req, err := c.lockRequest(key, ttl, opts)
	if err != nil {
		return LockHandle{}, err
	}
	req.Wait = true
	if req.Lease == 0 {
		// Grant the lease first and keep it alive while queued, so a long
		// wait does not outlive it; the lock owns it (Release revokes it).
		g, err := c.grantForLock(ctx, ttl)
		if err != nil {
			return LockHandle{}, err
		}
		req.Lease, req.TtlMs, req.LeaseOwned = g.ID, 0, true
		kctx, stop := context.WithCancel(context.Background())
		defer stop()
		if _, err := c.KeepAlive(kctx, g.ID); err != nil {
			c.revokeQuietly(g.ID)
			return LockHandle{}, err
		}
		resp, err := c.acquireRPC(ctx, req)
		if err != nil || !resp.GetAcquired() {
			c.revokeQuietly(g.ID)
			if err == nil {
				err = newError(ErrUnavailable, "lock %q was not granted", key)
			}
			return LockHandle{}, err
		}
		return handleFromPB(resp.GetHandle()), nil
	}
	resp, err := c.acquireRPC(ctx, req)
	if err != nil {
		return LockHandle{}, err
	}
	if !resp.GetAcquired() {
		return LockHandle{}, newError(ErrUnavailable, "lock %q was not granted", key)
	}
	return handleFromPB(resp.GetHandle()), nil
}

// grantForLock grants the lease a waiting lock will own. A grant whose
// outcome is unknown (say the leader died while it was pending) is just
// granted again: a lease that nothing uses has no keys and expires after
// its TTL, so a duplicate costs nothing, and the caller need not see an
// unknown outcome for a lock it has not yet asked for.
func (c *Client) grantForLock(ctx context.Context, ttl time.Duration) (*LeaseGrant, error) {
	for n := 0; ; n++ {
		g, err := c.Grant(ctx, ttl)
		if err == nil || !errors.Is(err, ErrUnknownOutcome) || ctx.Err() != nil || n >= c.cfg.MaxRetries {
			return g, err
		}
	}
}

func (c *Client) revokeQuietly(id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Revoke(ctx, id)
}

// Release releases the lock h holds and grants it to the next waiter; a
// lease granted for the lock is revoked. ErrLocked if h is not current
// (already released, expired or superseded): whatever h protected may
// have been touched by another holder since.
func (c *Client) Release(ctx context.Context, h LockHandle) error {
	var resp *dkvpb.LockReleaseResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.lockClient().Release(ctx, &dkvpb.LockReleaseRequest{Handle: h.pb()}, o...)
		return err
	})
	if err != nil {
		return err
	}
	if !resp.GetReleased() {
		return newError(ErrLocked, "lock handle for %q (token %d) is not current: the lock was already released, expired or taken over", h.Key, h.Token)
	}
	return nil
}

// LockInfo describes a lock.
type LockInfo struct {
	Key string
	// Holder is the current grant, nil when the lock is free.
	Holder *LockHandle
	// Remaining is the holder's lease's remaining TTL.
	Remaining time.Duration
	// QueueLength is the number of waiters.
	QueueLength int64
	// LastToken is the fencing token of the latest grant (0: never locked).
	LastToken int64
}

// DescribeLock reports key's lock at a linearizable point.
func (c *Client) DescribeLock(ctx context.Context, key string) (*LockInfo, error) {
	var resp *dkvpb.LockDescribeResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.lockClient().Describe(ctx, &dkvpb.LockDescribeRequest{Key: []byte(key)}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	info := &LockInfo{Key: key, QueueLength: resp.GetQueueLength(), LastToken: resp.GetLastToken(),
		Remaining: time.Duration(resp.GetRemainingMs()) * time.Millisecond}
	if resp.GetHeld() {
		h := handleFromPB(resp.GetHolder())
		info.Holder = &h
	}
	return info, nil
}

// Renew renews h's lease to its full TTL, if h is still the current
// holder (ErrLocked otherwise), and returns the TTL.
func (c *Client) Renew(ctx context.Context, h LockHandle) (time.Duration, error) {
	info, err := c.DescribeLock(ctx, h.Key)
	if err != nil {
		return 0, err
	}
	if info.Holder == nil || *info.Holder != h {
		return 0, newError(ErrLocked, "lock handle for %q (token %d) is not current", h.Key, h.Token)
	}
	return c.KeepAliveOnce(ctx, h.Lease)
}
