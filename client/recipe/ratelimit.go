package recipe

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// RateLimitClient is what the rate limiter uses of a DKV client;
// *client.Client satisfies it.
type RateLimitClient interface {
	RateLimitAllow(ctx context.Context, key string, l client.RateLimit, n int64) (client.RateDecision, error)
	RateLimitReserve(ctx context.Context, key string, l client.RateLimit, n int64, maxWait time.Duration) (client.RateDecision, error)
}

// ParseRate parses a rate such as "100/s", "5/m", "1/h", "250/100ms" or
// "100" (per second) into tokens per period.
func ParseRate(s string) (limit int64, period time.Duration, err error) {
	num, per, found := strings.Cut(strings.TrimSpace(s), "/")
	limit, err = strconv.ParseInt(num, 10, 64)
	if err != nil || limit < 1 {
		return 0, 0, &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("rate %q: the count before / must be a whole number of at least 1", s)}
	}
	period = time.Second
	if found {
		switch per {
		case "s":
		case "m":
			period = time.Minute
		case "h":
			period = time.Hour
		default:
			period, err = time.ParseDuration(per)
			if err != nil || period < time.Millisecond {
				return 0, 0, &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("rate %q: the period after / must be s, m, h or a duration of at least 1ms", s)}
			}
		}
	}
	return limit, period, nil
}

// LimiterOption configures NewLimiter.
type LimiterOption func(*Limiter)

// WithLocalBatch turns on local mode: the limiter takes batch tokens from
// the cluster at a time and hands them out from memory until they are
// used up, so only one decision in batch is a round trip. The price is
// precision: tokens a process took but has not used yet may be used in a
// later window, so over any window of length W the tokens used across P
// processes are at most burst + limit*W/period + P*batch (instead of
// burst + limit*W/period). batch must be 1 to the burst.
func WithLocalBatch(batch int64) LimiterOption { return func(l *Limiter) { l.batch = batch } }

// Limiter is one bucket of the cluster-wide rate limiter, shaped like
// golang.org/x/time/rate's Limiter: Allow, AllowN, Wait, WaitN, Reserve,
// ReserveN. Every decision is exact across every client of the cluster
// (one raft round trip), unless WithLocalBatch trades precision for
// speed. Methods are safe for concurrent use.
type Limiter struct {
	c     RateLimitClient
	key   string
	rate  client.RateLimit
	batch int64

	mu   sync.Mutex
	pool int64 // local mode: tokens taken from the cluster, not used yet
}

// NewLimiter returns the limiter for the bucket named key that refills
// rate.Limit tokens per rate.Period and holds at most rate.Burst. The
// bucket's state lives in the cluster; limiters in any number of
// processes sharing key and rate share the bucket. Bad parameters are
// refused here with ErrInvalidInput naming the limit (the server checks
// them again).
func NewLimiter(c RateLimitClient, key string, rate client.RateLimit, opts ...LimiterOption) (*Limiter, error) {
	l := &Limiter{c: c, key: key, rate: rate}
	for _, o := range opts {
		o(l)
	}
	invalid := func(format string, args ...any) error {
		return &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case key == "":
		return nil, invalid("rate limit key is empty")
	case rate.Limit < 1:
		return nil, invalid("rate limit limit is %d: it must be at least 1 token per period", rate.Limit)
	case rate.Period < time.Millisecond:
		return nil, invalid("rate limit period is %v: it must be at least 1ms", rate.Period)
	case rate.Burst < 1:
		return nil, invalid("rate limit burst is %d: it must be at least 1", rate.Burst)
	case l.batch < 0 || l.batch > rate.Burst:
		return nil, invalid("rate limit local batch is %d: it must be 1 to the burst, %d", l.batch, rate.Burst)
	}
	return l, nil
}

// Allow is AllowN(ctx, 1).
func (l *Limiter) Allow(ctx context.Context) (bool, error) { return l.AllowN(ctx, 1) }

// AllowN reports whether n tokens may be used now, and takes them if so.
func (l *Limiter) AllowN(ctx context.Context, n int64) (bool, error) {
	d, err := l.Decide(ctx, n)
	return d.Allowed, err
}

// Decide is AllowN with the whole decision: remaining tokens, retry-after
// and reset-after, for headers such as X-RateLimit-*. In local mode the
// numbers describe the last round trip (Remaining adds the local pool).
func (l *Limiter) Decide(ctx context.Context, n int64) (client.RateDecision, error) {
	if l.batch == 0 {
		return l.c.RateLimitAllow(ctx, l.key, l.rate, n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pool >= n {
		l.pool -= n
		return client.RateDecision{Allowed: true, Limit: l.rate.Burst, Remaining: l.pool, At: time.Now()}, nil
	}
	// Take a batch (or n, if larger); if the batch is not there, n alone
	// may be.
	take := max(l.batch, n)
	d, err := l.c.RateLimitAllow(ctx, l.key, l.rate, take)
	if err == nil && !d.Allowed && take > n {
		take = n
		d, err = l.c.RateLimitAllow(ctx, l.key, l.rate, take)
	}
	if err != nil || !d.Allowed {
		return d, err
	}
	l.pool += take - n
	d.Remaining += l.pool
	return d, nil
}

// Reservation is tokens taken from the bucket that may be used after a
// delay (see Limiter.ReserveN).
type Reservation struct {
	ok       bool
	useAt    time.Time
	decision client.RateDecision
}

// OK reports whether the tokens were taken: false when they would not be
// there within the maximum wait.
func (r *Reservation) OK() bool { return r.ok }

// Delay is how long from now until the tokens may be used (0 if now).
func (r *Reservation) Delay() time.Duration { return max(0, time.Until(r.useAt)) }

// Decision is the server's decision behind the reservation.
func (r *Reservation) Decision() client.RateDecision { return r.decision }

// Reserve is ReserveN(ctx, 1, maxWait).
func (l *Limiter) Reserve(ctx context.Context, maxWait time.Duration) (*Reservation, error) {
	return l.ReserveN(ctx, 1, maxWait)
}

// ReserveN takes n tokens that will be there within maxWait (at least
// 1ms) and says, in the Reservation, when they may be used. Unlike
// golang.org/x/time/rate, a reservation cannot be cancelled: its tokens
// are spent whether or not they are used. Local mode does not apply.
func (l *Limiter) ReserveN(ctx context.Context, n int64, maxWait time.Duration) (*Reservation, error) {
	d, err := l.c.RateLimitReserve(ctx, l.key, l.rate, n, maxWait)
	if err != nil {
		return nil, err
	}
	// The wait counts from the decision; counting it from the reply is
	// later still, never early.
	return &Reservation{ok: d.Allowed, useAt: time.Now().Add(d.Wait), decision: d}, nil
}

// Wait is WaitN(ctx, 1).
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// maxReserveWait bounds a Wait without a deadline.
const maxReserveWait = 365 * 24 * time.Hour

// WaitN blocks until n tokens may be used, taking them. It reserves them
// in one round trip (queueing fairly behind earlier reservations) and
// sleeps until their time; it fails at once if they would not be there
// before ctx's deadline. In local mode the local pool is tried first.
func (l *Limiter) WaitN(ctx context.Context, n int64) error {
	if l.batch > 0 {
		l.mu.Lock()
		if l.pool >= n {
			l.pool -= n
			l.mu.Unlock()
			return nil
		}
		l.mu.Unlock()
	}
	maxWait := maxReserveWait
	if dl, ok := ctx.Deadline(); ok {
		maxWait = time.Until(dl)
	}
	if maxWait < time.Millisecond {
		ok, err := l.AllowN(ctx, n)
		if err == nil && !ok {
			err = fmt.Errorf("rate limit %q: %d tokens are not there before the context's deadline", l.key, n)
		}
		return err
	}
	r, err := l.ReserveN(ctx, n, maxWait)
	if err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("rate limit %q: %d tokens would not be there before the context's deadline (retry after %v)", l.key, n, r.decision.RetryAfter)
	}
	if d := r.Delay(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
