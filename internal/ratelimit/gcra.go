package ratelimit

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
)

// Bounds of a request, named in the InvalidInput they earn.
const (
	MaxLimit    = 1_000_000_000
	MaxBurst    = 1_000_000_000
	MaxPeriodMs = 365 * 24 * 3600 * 1000
	// maxSpan bounds burst x T so that now + burst x T cannot overflow
	// int64 nanoseconds for the next centuries.
	maxSpan = 1 << 60
)

// Params is a bucket: limit tokens per period, at most burst held.
type Params struct {
	Limit    int64
	PeriodMs int64
	Burst    int64
}

// Interval is T, the emission interval in nanoseconds: period/limit,
// rounded up so the limiter never allows more than the stated rate.
func (p Params) Interval() int64 {
	period := p.PeriodMs * 1_000_000
	return (period + p.Limit - 1) / p.Limit
}

// State is a key's bucket: TAT, the theoretical arrival time (the bucket
// is full at or after it), and Last, the latest decision time seen on the
// key, which keeps time from going backwards.
type State struct {
	TAT  int64
	Last int64
}

// Decision is the outcome of one request, durations in nanoseconds.
type Decision struct {
	Allowed    bool
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
	// At is the time the decision was made at (after clamping).
	At int64
	// Wait is, for an allowed reservation, how long after At the tokens
	// may be used.
	Wait int64
}

func invalid(format string, args ...any) error {
	return dkverr.New(dkverr.InvalidInput, format, args...)
}

// Validate checks a request's fields; maxKey bounds the key's size.
func Validate(r *dkvpb.RateLimitRequest, maxKey int) error {
	switch {
	case r == nil:
		return invalid("rate limit request is empty")
	case len(r.Key) == 0:
		return invalid("rate limit key is empty")
	case len(r.Key) > maxKey:
		return invalid("rate limit key is %d bytes, over the limit of %d", len(r.Key), maxKey)
	case r.Limit < 1 || r.Limit > MaxLimit:
		return invalid("rate limit limit is %d: it must be 1 to %d tokens per period", r.Limit, MaxLimit)
	case r.PeriodMs < 1 || r.PeriodMs > MaxPeriodMs:
		return invalid("rate limit period is %d ms: it must be 1 ms to %d ms (1 year)", r.PeriodMs, MaxPeriodMs)
	case r.Burst < 1 || r.Burst > MaxBurst:
		return invalid("rate limit burst is %d: it must be 1 to %d", r.Burst, MaxBurst)
	case r.N < 1 || r.N > r.Burst:
		return invalid("rate limit n is %d: it must be 1 to the burst, %d (more could never be allowed)", r.N, r.Burst)
	case r.MaxWaitMs < 0 || r.MaxWaitMs > MaxPeriodMs:
		return invalid("rate limit max wait is %d ms: it must be 0 to %d ms (1 year)", r.MaxWaitMs, MaxPeriodMs)
	}
	p := Params{Limit: r.Limit, PeriodMs: r.PeriodMs, Burst: r.Burst}
	if t := p.Interval(); r.Burst > maxSpan/t {
		return invalid("rate limit burst %d x interval %d ns is over the limit of 2^60 ns: lower the burst or raise the rate", r.Burst, t)
	}
	return nil
}

// Decide applies GCRA: n tokens are allowed at now if, with TAT' =
// max(TAT, now) + n*T, TAT' - now <= burst*T + maxWait; they may be used
// Wait = max(0, TAT' - burst*T - now) after now (0 unless maxWait > 0).
// p, n and maxWait (ns) must have passed Validate. It returns the new
// state (unchanged when refused, except for the clamped time) and the
// decision.
func Decide(s State, now int64, p Params, n, maxWait int64) (State, Decision) {
	if now < s.Last {
		now = s.Last
	}
	s.Last = now
	t := p.Interval()
	capacity := p.Burst * t
	base := max(s.TAT, now)
	tat := base + n*t
	d := Decision{At: now}
	if tat-now <= capacity+maxWait {
		s.TAT = tat
		d.Allowed = true
		d.Remaining = max(0, capacity-(tat-now)) / t
		d.ResetAfter = tat - now
		d.Wait = max(0, tat-capacity-now)
		return s, d
	}
	// Refused: it would fit once tat - capacity has come.
	d.RetryAfter = tat - capacity - now
	d.Remaining = (capacity - (base - now)) / t
	d.ResetAfter = base - now
	return s, d
}

// StateKey is the key holding a bucket's state.
func StateKey(key []byte) []byte {
	k := make([]byte, 0, len(keys.RateLimitPrefix)+len(key))
	return append(append(k, keys.RateLimitPrefix...), key...)
}

const stateLen = 16

func decode(v []byte) (State, error) {
	if len(v) != stateLen {
		return State{}, fmt.Errorf("rate limit state is %d bytes, want %d", len(v), stateLen)
	}
	return State{TAT: int64(binary.BigEndian.Uint64(v)), Last: int64(binary.BigEndian.Uint64(v[8:]))}, nil
}

func encode(s State) []byte {
	v := make([]byte, stateLen)
	binary.BigEndian.PutUint64(v, uint64(s.TAT))
	binary.BigEndian.PutUint64(v[8:], uint64(s.Last))
	return v
}

// Get reads a bucket's state (zero if it has none).
func Get(r pebble.Reader, key []byte) (State, error) {
	v, c, err := r.Get(StateKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return State{}, nil
	}
	if err != nil {
		return State{}, err
	}
	defer c.Close()
	return decode(v)
}

// Apply decides r at now (the entry's time) against the state in b and
// writes the new state into b. r must have passed Validate. Errors are
// storage errors: the caller stops the node.
func Apply(b *pebble.Batch, r *dkvpb.RateLimitRequest, now int64) (*dkvpb.RateLimitResponse, error) {
	s, err := Get(b, r.Key)
	if err != nil {
		return nil, err
	}
	p := Params{Limit: r.Limit, PeriodMs: r.PeriodMs, Burst: r.Burst}
	s, d := Decide(s, now, p, r.N, r.MaxWaitMs*1_000_000)
	if err := b.Set(StateKey(r.Key), encode(s), nil); err != nil {
		return nil, err
	}
	return &dkvpb.RateLimitResponse{
		Allowed:         d.Allowed,
		Limit:           r.Burst,
		Remaining:       d.Remaining,
		RetryAfterMs:    ceilMs(d.RetryAfter),
		ResetAfterMs:    ceilMs(d.ResetAfter),
		DecidedUnixNano: d.At,
		WaitMs:          ceilMs(d.Wait),
	}, nil
}

// ceilMs rounds a duration up to whole milliseconds, so a client that
// waits retry_after_ms is never early.
func ceilMs(ns int64) int64 { return (ns + 999_999) / 1_000_000 }
