package client

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// RateLimit is a bucket on the cluster's exact rate limiter: Limit tokens
// per Period, at most Burst held (the bucket's capacity). See
// docs/recipes.md, "Rate limiter".
type RateLimit struct {
	Limit  int64
	Period time.Duration
	Burst  int64
}

// RateDecision is the outcome of RateLimitAllow, the fields redis-cell's
// CL.THROTTLE returns.
type RateDecision struct {
	// Allowed says whether the tokens were taken.
	Allowed bool
	// Limit is the bucket's capacity (RateLimit.Burst).
	Limit int64
	// Remaining is the number of tokens left after this decision.
	Remaining int64
	// RetryAfter is how long until the same request would be allowed; 0
	// when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// At is the cluster's time of the decision.
	At time.Time
	// Wait is, for a reservation (RateLimitReserve), how long after the
	// decision the tokens may be used.
	Wait time.Duration
}

// RateLimitAllow takes n tokens from key's bucket if it holds them, in one
// raft round trip: the decision is exact across every client of the
// cluster. A refusal is not an error (Allowed=false). Bad parameters (a
// Limit or Period below 1, a Burst below 1, n outside 1..Burst) are
// ErrInvalidInput naming the limit. A retried decision whose first try's
// outcome was unknown may have taken its tokens twice: the limiter errs
// on the side of allowing less, never more.
func (c *Client) RateLimitAllow(ctx context.Context, key string, l RateLimit, n int64) (RateDecision, error) {
	return c.rateLimit(ctx, key, l, n, 0)
}

// RateLimitReserve is RateLimitAllow for tokens that may come later: they
// are taken if they will be there within maxWait (at least 1ms), and the
// decision's Wait says how long to wait before using them. Tokens
// reserved are spent even if the caller never uses them.
func (c *Client) RateLimitReserve(ctx context.Context, key string, l RateLimit, n int64, maxWait time.Duration) (RateDecision, error) {
	if maxWait < time.Millisecond {
		return RateDecision{}, newError(ErrInvalidInput, "rate limit max wait is %v: it must be at least 1ms", maxWait)
	}
	return c.rateLimit(ctx, key, l, n, maxWait)
}

func (c *Client) rateLimit(ctx context.Context, key string, l RateLimit, n int64, maxWait time.Duration) (RateDecision, error) {
	if l.Period > 0 && l.Period < time.Millisecond {
		return RateDecision{}, newError(ErrInvalidInput, "rate limit period is %v: it must be at least 1ms", l.Period)
	}
	req := &dkvpb.RateLimitRequest{Key: []byte(key), Limit: l.Limit, PeriodMs: l.Period.Milliseconds(), Burst: l.Burst, N: n,
		MaxWaitMs: maxWait.Milliseconds()}
	var resp *dkvpb.RateLimitResponse
	err := c.callOnce(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.rl.Allow(ctx, req, o...)
		return err
	})
	if err != nil {
		return RateDecision{}, err
	}
	return RateDecision{
		Allowed:    resp.GetAllowed(),
		Limit:      resp.GetLimit(),
		Remaining:  resp.GetRemaining(),
		RetryAfter: time.Duration(resp.GetRetryAfterMs()) * time.Millisecond,
		ResetAfter: time.Duration(resp.GetResetAfterMs()) * time.Millisecond,
		At:         time.Unix(0, resp.GetDecidedUnixNano()),
		Wait:       time.Duration(resp.GetWaitMs()) * time.Millisecond,
	}, nil
}
