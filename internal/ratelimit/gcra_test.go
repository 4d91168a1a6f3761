package ratelimit

import (
	"errors"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

const ms = int64(1_000_000)

// TestDecideTable walks one bucket (10 per second, burst 3: T = 100 ms)
// through a sequence of requests at fixed times.
func TestDecideTable(t *testing.T) {
	p := Params{Limit: 10, PeriodMs: 1000, Burst: 3}
	steps := []struct {
		at   int64 // ms
		n    int64
		want Decision
	}{
		// A fresh bucket is full: three single tokens, then a refusal.
		{0, 1, Decision{Allowed: true, Remaining: 2, ResetAfter: 100 * ms}},
		{0, 1, Decision{Allowed: true, Remaining: 1, ResetAfter: 200 * ms}},
		{0, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 300 * ms}},
		{0, 1, Decision{Allowed: false, Remaining: 0, RetryAfter: 100 * ms, ResetAfter: 300 * ms}},
		// 100 ms later one token has come back.
		{100, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 300 * ms}},
		// 2 tokens are not there 50 ms later: retry when both are.
		{150, 2, Decision{Allowed: false, Remaining: 0, RetryAfter: 150 * ms, ResetAfter: 250 * ms}},
		// A clock behind the key's latest decision decides at that time.
		{120, 1, Decision{Allowed: false, Remaining: 0, RetryAfter: 50 * ms, ResetAfter: 250 * ms, At: 150 * ms}},
		// Long idle: the bucket is full again, never fuller.
		{10_000, 3, Decision{Allowed: true, Remaining: 0, ResetAfter: 300 * ms}},
	}
	var s State
	for i, st := range steps {
		var d Decision
		s, d = Decide(s, st.at*ms, p, st.n, 0)
		want := st.want
		if want.At == 0 {
			want.At = st.at * ms
		}
		if d != want {
			t.Fatalf("step %d (at %d ms, n %d): got %+v, want %+v", i, st.at, st.n, d, want)
		}
	}
}

// TestIntervalRoundsUp: a rate whose interval is not a whole number of
// nanoseconds rounds T up, so the limiter errs on allowing less.
func TestIntervalRoundsUp(t *testing.T) {
	p := Params{Limit: 3, PeriodMs: 1000, Burst: 1}
	if got := p.Interval(); got != 333_333_334 {
		t.Fatalf("interval %d, want 333333334", got)
	}
}

// TestNeverOverWindow drives a bucket with a dense, deterministic stream
// of requests and checks the bound the docs state: over any interval of
// decision times of length W, allowed <= burst + W/T.
func TestNeverOverWindow(t *testing.T) {
	p := Params{Limit: 7, PeriodMs: 1000, Burst: 5}
	T := p.Interval()
	var s State
	var times []int64 // one per allowed token
	now := int64(0)
	for i := 0; i < 20000; i++ {
		now += int64(i%7+1) * 3 * ms // uneven steps, all deterministic
		n := int64(i%3 + 1)
		var d Decision
		s, d = Decide(s, now, p, n, 0)
		if d.Allowed {
			for j := int64(0); j < n; j++ {
				times = append(times, d.At)
			}
		}
	}
	if len(times) < 100 {
		t.Fatalf("only %d tokens allowed: the stream did not exercise the bucket", len(times))
	}
	for _, w := range []int64{1, 100 * ms, 1000 * ms, 10_000 * ms} {
		lo := 0
		for hi := range times {
			for times[hi]-times[lo] > w {
				lo++
			}
			if got, bound := int64(hi-lo+1), p.Burst+w/T; got > bound {
				t.Fatalf("window %d ns: %d tokens allowed in [%d,%d], bound %d", w, got, times[lo], times[hi], bound)
			}
		}
	}
}

func TestValidateNamesTheLimit(t *testing.T) {
	ok := dkvpb.RateLimitRequest{Key: []byte("k"), Limit: 100, PeriodMs: 1000, Burst: 20, N: 1}
	for _, c := range []struct {
		name string
		edit func(r *dkvpb.RateLimitRequest)
		want string
	}{
		{"rate 0", func(r *dkvpb.RateLimitRequest) { r.Limit = 0 }, "limit is 0: it must be 1 to 1000000000"},
		{"burst negative", func(r *dkvpb.RateLimitRequest) { r.Burst = -1 }, "burst is -1: it must be 1 to"},
		{"n over burst", func(r *dkvpb.RateLimitRequest) { r.N = 21 }, "n is 21: it must be 1 to the burst, 20"},
		{"n zero", func(r *dkvpb.RateLimitRequest) { r.N = 0 }, "n is 0"},
		{"period 0", func(r *dkvpb.RateLimitRequest) { r.PeriodMs = 0 }, "period is 0 ms"},
		{"empty key", func(r *dkvpb.RateLimitRequest) { r.Key = nil }, "key is empty"},
		{"long key", func(r *dkvpb.RateLimitRequest) { r.Key = make([]byte, 9) }, "over the limit of 8"},
		{"span", func(r *dkvpb.RateLimitRequest) { r.Limit, r.PeriodMs, r.Burst = 1, MaxPeriodMs, MaxBurst }, "over the limit of 2^60 ns"},
	} {
		r := dkvpb.RateLimitRequest{Key: ok.Key, Limit: ok.Limit, PeriodMs: ok.PeriodMs, Burst: ok.Burst, N: ok.N}
		c.edit(&r)
		err := Validate(&r, 8)
		var de *dkverr.Error
		if !errors.As(err, &de) || de.Code != dkverr.InvalidInput || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want InvalidInput containing %q", c.name, err, c.want)
		}
	}
	if err := Validate(&ok, 8); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
}

// TestReservation: a reservation takes tokens that are not there yet and
// says when they may be used; the reserved use times keep the same bound.
func TestReservation(t *testing.T) {
	p := Params{Limit: 10, PeriodMs: 1000, Burst: 2} // T = 100 ms
	var s State
	var d Decision
	s, d = Decide(s, 0, p, 2, 0)
	if !d.Allowed || d.Wait != 0 {
		t.Fatalf("first: %+v", d)
	}
	s, d = Decide(s, 0, p, 1, 50*ms)
	if d.Allowed || d.RetryAfter != 100*ms {
		t.Fatalf("a reservation that would wait 100 ms within 50 ms: %+v", d)
	}
	s, d = Decide(s, 0, p, 1, 100*ms)
	if !d.Allowed || d.Wait != 100*ms || d.Remaining != 0 {
		t.Fatalf("a reservation within 100 ms: %+v", d)
	}
	_, d = Decide(s, 0, p, 2, 1000*ms)
	if !d.Allowed || d.Wait != 300*ms {
		t.Fatalf("next reservation waits behind the first: %+v", d)
	}
}

func BenchmarkDecide(b *testing.B) {
	p := Params{Limit: 100, PeriodMs: 1000, Burst: 20}
	var s State
	now := int64(0)
	for b.Loop() {
		now += 3 * ms
		s, _ = Decide(s, now, p, 1, 0)
	}
}

// TestClockAheadGivesAtMostBurst: a proposer whose clock is an hour ahead
// refills the bucket to its burst, no more; the others, behind, then
// decide at its time and get nothing until the bucket refills there.
func TestClockAheadGivesAtMostBurst(t *testing.T) {
	p := Params{Limit: 10, PeriodMs: 1000, Burst: 3}
	var s State
	for range 3 {
		s, _ = Decide(s, 0, p, 1, 0) // empty the bucket at t=0
	}
	hour := int64(3600_000) * ms
	allowed := 0
	for i := range 10 {
		at := int64(0)
		if i == 0 {
			at = hour // the fast proposer
		}
		var d Decision
		s, d = Decide(s, at, p, 1, 0)
		if d.At != hour {
			t.Fatalf("decision %d at %d, want the fast clock's %d", i, d.At, hour)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != int(p.Burst) {
		t.Fatalf("%d allowed after the jump, want the burst, %d", allowed, p.Burst)
	}
}
