package client

import (
	"context"
	"errors"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// ErrLeaseExpired is reported by KeepAlive when the lease's TTL ran out
// (counted from when the last acknowledged keep-alive was sent) without
// another keep-alive being acknowledged, e.g. because no member could be
// reached. The lease may already have expired on the server; treat
// whatever it protected as lost. errors.Is(err, ErrLeaseNotFound) is false:
// the server did not say so.
var ErrLeaseExpired = errors.New("lease TTL ran out before a keep-alive was acknowledged")

// LeaseGrant is the outcome of Grant.
type LeaseGrant struct {
	ID  int64
	TTL time.Duration
}

// LeaseInfo is the outcome of TimeToLive.
type LeaseInfo struct {
	ID int64
	// GrantedTTL is the TTL the lease was granted with.
	GrantedTTL time.Duration
	// Remaining is the time left before the lease expires unless kept
	// alive (exact when served by the leader, an estimate otherwise).
	Remaining time.Duration
	// Keys are the attached keys, with WithAttachedKeys.
	Keys []string
}

// LeaseStatus is one entry of Leases.
type LeaseStatus struct {
	ID         int64
	GrantedTTL time.Duration
}

// LeaseOption configures Grant and TimeToLive.
type LeaseOption func(*leaseConfig)

type leaseConfig struct {
	id   int64
	keys bool
}

// WithLeaseID makes Grant use id instead of a server-picked one; the grant
// fails with ErrConflict if a lease with that id exists.
func WithLeaseID(id int64) LeaseOption { return func(c *leaseConfig) { c.id = id } }

// WithAttachedKeys makes TimeToLive also return the lease's keys.
func WithAttachedKeys() LeaseOption { return func(c *leaseConfig) { c.keys = true } }

func leaseOpts(opts []LeaseOption) leaseConfig {
	var c leaseConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

func (c *Client) leaseClient() dkvpb.LeaseClient { return dkvpb.NewLeaseClient(c.cc) }

// Grant creates a lease with the given TTL (1s to 1 year, millisecond
// precision; otherwise ErrInvalidInput). Keys put WithLease(id) are deleted
// when it is revoked or expires; KeepAlive keeps it from expiring.
func (c *Client) Grant(ctx context.Context, ttl time.Duration, opts ...LeaseOption) (*LeaseGrant, error) {
	cfg := leaseOpts(opts)
	if cfg.keys {
		return nil, newError(ErrInvalidInput, "Grant takes no WithAttachedKeys")
	}
	var resp *dkvpb.LeaseGrantResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.leaseClient().Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: ttl.Milliseconds(), Id: cfg.id}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &LeaseGrant{ID: resp.GetId(), TTL: time.Duration(resp.GetTtlMs()) * time.Millisecond}, nil
}

// Revoke ends lease id now and deletes its keys (one revision).
// ErrLeaseNotFound if it does not exist.
func (c *Client) Revoke(ctx context.Context, id int64) error {
	return c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.leaseClient().Revoke(ctx, &dkvpb.LeaseRevokeRequest{Id: id}, o...)
		return err
	})
}

// KeepAliveOnce renews lease id to its full TTL once and returns the TTL.
// The lease then lives at least TTL from when this call was made.
// ErrLeaseNotFound if it does not exist.
func (c *Client) KeepAliveOnce(ctx context.Context, id int64) (time.Duration, error) {
	var resp *dkvpb.LeaseKeepAliveOnceResponse
	// Renewing twice is harmless, so it is retried like a read; it is a
	// proposal, so it goes to the leader when known, like a write.
	err := c.callOnLeader(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.leaseClient().KeepAliveOnce(ctx, &dkvpb.LeaseKeepAliveOnceRequest{Id: id}, o...)
		return err
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.GetTtlMs()) * time.Millisecond, nil
}

// TimeToLive reports lease id's granted and remaining TTL and, with
// WithAttachedKeys, its keys. ErrLeaseNotFound if it does not exist.
func (c *Client) TimeToLive(ctx context.Context, id int64, opts ...LeaseOption) (*LeaseInfo, error) {
	cfg := leaseOpts(opts)
	if cfg.id != 0 {
		return nil, newError(ErrInvalidInput, "TimeToLive takes no WithLeaseID")
	}
	var resp *dkvpb.LeaseTimeToLiveResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.leaseClient().TimeToLive(ctx, &dkvpb.LeaseTimeToLiveRequest{Id: id, Keys: cfg.keys}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	info := &LeaseInfo{
		ID:         resp.GetId(),
		GrantedTTL: time.Duration(resp.GetGrantedTtlMs()) * time.Millisecond,
		Remaining:  time.Duration(resp.GetRemainingMs()) * time.Millisecond,
	}
	for _, k := range resp.GetKeys() {
		info.Keys = append(info.Keys, string(k))
	}
	return info, nil
}

// Leases lists every lease; with auth enabled, only the caller's own
// (root: every lease).
func (c *Client) Leases(ctx context.Context) ([]LeaseStatus, error) {
	var resp *dkvpb.LeaseLeasesResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.leaseClient().Leases(ctx, &dkvpb.LeaseLeasesRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]LeaseStatus, 0, len(resp.GetLeases()))
	for _, l := range resp.GetLeases() {
		out = append(out, LeaseStatus{ID: l.GetId(), GrantedTTL: time.Duration(l.GetGrantedTtlMs()) * time.Millisecond})
	}
	return out, nil
}

// KeepAlive keeps lease id alive in the background until ctx ends. It
// renews the lease once before returning (ErrLeaseNotFound if it does not
// exist), then about every TTL/3 over the client's one keep-alive stream,
// which carries every lease this Client keeps alive.
//
// The returned channel receives one error if the lease is lost, then is
// closed: ErrLeaseNotFound when the server reports the lease gone (revoked
// or expired), ErrLeaseExpired when its TTL ran out, counted from the
// sending of the last acknowledged keep-alive, without a newer one being
// acknowledged (less 1% for this process's clock drift). When ctx ends the channel is closed without an error (the
// lease is left to expire; Revoke it to end it now).
func (c *Client) KeepAlive(ctx context.Context, id int64) (<-chan error, error) {
	sent := time.Now()
	ttl, err := c.KeepAliveOnce(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.addKeepAlive(ctx, id, ttl, sent), nil
}

// clientClockDrift is how far this process's clock rate may be from real
// time, as the servers' --lease-max-clock-drift allows for theirs.
const clientClockDrift = 0.01

// surelyAlive is how long after sending an acknowledged keep-alive the
// lease is surely still alive, measured on this process's clock: the
// server guarantees ttl of real time, and a clock running up to
// clientClockDrift slow would count ttl only after more than that.
func surelyAlive(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl) * (1 - clientClockDrift))
}

// keepAliver runs the client's keep-alive stream.
type keepAliver struct {
	c       *Client
	mu      sync.Mutex
	leases  map[int64]*kaLease
	running bool
}

type kaLease struct {
	ttl      time.Duration
	deadline time.Time // surely alive until then
	nextSend time.Time
	sentAt   time.Time // oldest unacknowledged send; zero if none
	lost     chan error
	stop     func() bool
}

// keepAlivers holds each Client's keep-alive runner while it has leases
// to keep alive. Lock order: kaMu, then keepAliver.mu.
var (
	kaMu        sync.Mutex
	keepAlivers = map[*Client]*keepAliver{}
)

func (c *Client) addKeepAlive(ctx context.Context, id int64, ttl time.Duration, sent time.Time) <-chan error {
	kaMu.Lock()
	defer kaMu.Unlock()
	k := keepAlivers[c]
	if k == nil {
		k = &keepAliver{c: c, leases: map[int64]*kaLease{}}
		keepAlivers[c] = k
	}
	l := &kaLease{ttl: ttl, deadline: sent.Add(surelyAlive(ttl)), nextSend: sent.Add(ttl / 3), lost: make(chan error, 1)}
	k.mu.Lock()
	if old := k.leases[id]; old != nil {
		// A second KeepAlive of the same lease replaces the first.
		old.stop()
		close(old.lost)
	}
	k.leases[id] = l
	l.stop = context.AfterFunc(ctx, func() { k.remove(id, l, nil) })
	if !k.running {
		k.running = true
		go k.run()
	}
	k.mu.Unlock()
	return l.lost
}

// remove drops l (if it is still id's entry) and ends its channel,
// reporting err first if non-nil.
func (k *keepAliver) remove(id int64, l *kaLease, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removeLocked(id, l, err)
}

func (k *keepAliver) removeLocked(id int64, l *kaLease, err error) {
	if k.leases[id] != l {
		return
	}
	delete(k.leases, id)
	l.stop()
	if err != nil {
		l.lost <- err
	}
	close(l.lost)
}

const kaTick = 50 * time.Millisecond

// run keeps one stream open while there are leases to keep alive.
func (k *keepAliver) run() {
	b := newBackoff(k.c.cfg.RetryBackoff)
	for {
		kaMu.Lock()
		k.mu.Lock()
		if len(k.leases) == 0 {
			k.running = false
			delete(keepAlivers, k.c)
			k.mu.Unlock()
			kaMu.Unlock()
			return
		}
		k.mu.Unlock()
		kaMu.Unlock()
		if k.c.conn.GetState() == connectivity.Shutdown {
			k.failAll(newError(ErrUnavailable, "client closed"))
			continue
		}
		if k.stream() {
			b.reset()
			continue
		}
		// Every failure is retried: the leases are renewed again on the
		// next stream, and expire locally meanwhile if it takes too long.
		b.wait(context.Background(), kaTick, func() { k.expireLocal(time.Now()) })
	}
}

func (k *keepAliver) failAll(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, l := range k.leases {
		k.removeLocked(id, l, err)
	}
}

// expireLocal reports leases whose TTL ran out without an acknowledgment.
func (k *keepAliver) expireLocal(now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, l := range k.leases {
		if !now.Before(l.deadline) {
			k.removeLocked(id, l, newError(ErrLeaseExpired, "lease %d: no keep-alive acknowledged within its TTL of %v", id, l.ttl))
		}
	}
}

// stream runs one keep-alive stream until it breaks or there is nothing
// left to keep alive; it reports whether the stream got any answer.
func (k *keepAliver) stream() (answered bool) {
	// On the leader when known: a renewal sent to a follower is
	// proposed there and forwarded, an extra hop per batch.
	ctx, heard, end := k.c.streamAttempt(context.Background(), true)
	defer end()
	st, err := k.c.leaseClient().KeepAlive(ctx)
	if err != nil {
		return false
	}
	// Whatever was in flight on a previous stream is lost: resend now,
	// keeping the older send time (acknowledgments count from it).
	k.mu.Lock()
	now := time.Now()
	for _, l := range k.leases {
		l.nextSend = now
	}
	k.mu.Unlock()

	recvErr := make(chan error, 1)
	var gotAnswer sync.Once
	answeredc := make(chan struct{})
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			heard()
			gotAnswer.Do(func() { close(answeredc) })
			k.acked(resp.GetResults())
		}
	}()
	defer func() {
		select {
		case <-answeredc:
			answered = true
		default:
		}
	}()
	t := time.NewTicker(kaTick)
	defer t.Stop()
	for {
		now := time.Now()
		k.expireLocal(now)
		ids, empty := k.due(now)
		if empty {
			_ = st.CloseSend()
			return
		}
		for len(ids) > 0 {
			n := min(len(ids), 10000)
			if err := st.Send(&dkvpb.LeaseKeepAliveRequest{Ids: ids[:n]}); err != nil {
				return
			}
			ids = ids[n:]
		}
		select {
		case <-recvErr:
			return
		case <-t.C:
		}
	}
}

// due returns the leases to renew now and marks them sent.
func (k *keepAliver) due(now time.Time) (ids []int64, empty bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, l := range k.leases {
		if now.Before(l.nextSend) {
			continue
		}
		if l.sentAt.IsZero() {
			l.sentAt = now
		}
		l.nextSend = now.Add(max(l.ttl/3, kaTick))
		ids = append(ids, id)
	}
	return ids, len(k.leases) == 0
}

func (k *keepAliver) acked(rs []*dkvpb.LeaseKeepAliveResult) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range rs {
		l := k.leases[r.GetId()]
		if l == nil {
			continue
		}
		if r.GetNotFound() || r.GetTtlMs() <= 0 {
			k.removeLocked(r.GetId(), l, newError(ErrLeaseNotFound, "lease %d not found (revoked or expired)", r.GetId()))
			continue
		}
		if l.sentAt.IsZero() {
			continue // a duplicate answer
		}
		l.ttl = time.Duration(r.GetTtlMs()) * time.Millisecond
		if d := l.sentAt.Add(surelyAlive(l.ttl)); d.After(l.deadline) {
			l.deadline = d
		}
		l.nextSend = l.sentAt.Add(l.ttl / 3)
		l.sentAt = time.Time{}
	}
}
