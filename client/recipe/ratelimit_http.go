package recipe

import (
	"net/http"
	"strconv"
	"time"

	"github.com/dkv-io/dkv/client"
)

// MiddlewareOption configures RateLimitMiddleware.
type MiddlewareOption func(*middleware)

// WithFailOpen lets requests through when the cluster cannot decide (it
// is unreachable, say); by default they get 503 Service Unavailable.
func WithFailOpen() MiddlewareOption { return func(m *middleware) { m.failOpen = true } }

// WithCost sets how many tokens a request takes (default 1).
func WithCost(fn func(*http.Request) int64) MiddlewareOption {
	return func(m *middleware) { m.cost = fn }
}

type middleware struct {
	c        RateLimitClient
	rate     client.RateLimit
	key      func(*http.Request) string
	cost     func(*http.Request) int64
	failOpen bool
}

// RateLimitMiddleware limits requests by a key function: each distinct
// key (a client IP, an API token, a tenant) is its own bucket of the
// cluster-wide limiter, shared by every instance of the service. Every
// response carries X-RateLimit-Limit (the burst), X-RateLimit-Remaining
// and X-RateLimit-Reset (seconds until the bucket is full again); a
// refused request gets 429 Too Many Requests with Retry-After (seconds,
// rounded up). A request whose key is "" is not limited.
func RateLimitMiddleware(c RateLimitClient, rate client.RateLimit, key func(*http.Request) string, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := &middleware{c: c, rate: rate, key: key, cost: func(*http.Request) int64 { return 1 }}
	for _, o := range opts {
		o(m)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k := m.key(r)
			if k == "" {
				next.ServeHTTP(w, r)
				return
			}
			d, err := m.c.RateLimitAllow(r.Context(), k, m.rate, m.cost(r))
			if err != nil {
				if m.failOpen {
					next.ServeHTTP(w, r)
					return
				}
				http.Error(w, "rate limiter unavailable: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			h := w.Header()
			h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
			h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
			h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.ResetAfter), 10))
			if !d.Allowed {
				h.Set("Retry-After", strconv.FormatInt(ceilSeconds(d.RetryAfter), 10))
				http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// ceilSeconds rounds up, so a client that waits Retry-After is not early.
func ceilSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }
