package runner

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"
)

// Watch-style workloads measure events delivered to watchers rather than
// request/response ops. Writers embed their send time in each value
// (StampValue); each watch receiver records what it gets in its own
// EventStats; FillEventExtra merges them into Result.Extra. The helpers
// live here, not in a system's package, so DKV and etcd runs stamp and
// measure identically.

// stampDigits is the width of the send time (Unix nanoseconds,
// zero-padded) at the start of a stamped value, followed by '|'.
const stampDigits = 19

// StampLen is the length of the stamp; a stamped value is never shorter.
const StampLen = stampDigits + 1

// StampValue returns a copy of filler whose first StampLen bytes are
// replaced by t (printable: digits and '|'). The value is
// max(len(filler), StampLen) bytes long.
func StampValue(filler []byte, t time.Time) []byte {
	v := make([]byte, max(len(filler), StampLen))
	copy(v, filler)
	s := strconv.FormatInt(t.UnixNano(), 10)
	pad := stampDigits - len(s)
	for i := range pad {
		v[i] = '0'
	}
	copy(v[pad:stampDigits], s)
	v[stampDigits] = '|'
	return v
}

// ParseStamp reads the send time StampValue put in v.
func ParseStamp(v []byte) (time.Time, bool) {
	if len(v) < StampLen || v[stampDigits] != '|' {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(string(v[:stampDigits]), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// EventStats counts the events one receiver goroutine got and times them
// from their stamped send time. Record must be called from one goroutine
// at a time; Count may be read concurrently; Histogram only once the
// receiver has stopped.
type EventStats struct {
	hist      Histogram
	n         atomic.Int64
	unstamped atomic.Int64
	last      atomic.Int64 // Unix ns of the last event received
}

// Record counts one event with value v, received at now.
func (s *EventStats) Record(v []byte, now time.Time) {
	if t, ok := ParseStamp(v); ok {
		s.hist.Record(now.Sub(t))
	} else {
		s.unstamped.Add(1)
	}
	s.n.Add(1)
	s.last.Store(now.UnixNano())
}

// Count is the number of events recorded so far.
func (s *EventStats) Count() int64 { return s.n.Load() }

// TotalEvents sums Count over stats.
func TotalEvents(stats []*EventStats) int64 {
	var n int64
	for _, s := range stats {
		n += s.Count()
	}
	return n
}

// WaitEvents waits until the receivers have got at least expected events
// in total, or none arrived for idle, or max passed, or ctx ended. It is
// how a watch run lets the events of the last puts arrive before counting.
func WaitEvents(ctx context.Context, stats []*EventStats, expected int64, idle, max time.Duration) {
	deadline := time.Now().Add(max)
	last, lastChange := TotalEvents(stats), time.Now()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		n := TotalEvents(stats)
		if n >= expected {
			return
		}
		now := time.Now()
		if n != last {
			last, lastChange = n, now
		}
		if now.Sub(lastChange) >= idle || now.After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// FillEventExtra merges the receivers' stats (they must have stopped) into
// res.Extra: events delivered, the events expected (puts × watchers),
// events/s over [start, last event], and the put→event latency summary in
// ms.
func FillEventExtra(res *Result, stats []*EventStats, start time.Time, watchers int, expected int64) {
	var (
		h         Histogram
		n, bad    int64
		lastNanos int64
	)
	for _, s := range stats {
		h.Merge(&s.hist)
		n += s.Count()
		bad += s.unstamped.Load()
		lastNanos = max(lastNanos, s.last.Load())
	}
	if res.Extra == nil {
		res.Extra = map[string]float64{}
	}
	e := res.Extra
	e["watchers"] = float64(watchers)
	e["events"] = float64(n)
	e["expected_events"] = float64(expected)
	if bad > 0 {
		e["unstamped_events"] = float64(bad)
	}
	e["events_per_sec"] = 0
	if lastNanos > 0 {
		if d := time.Unix(0, lastNanos).Sub(start).Seconds(); d > 0 {
			e["events_per_sec"] = float64(n) / d
		}
	}
	e["event_mean_ms"] = ms(h.Mean())
	e["event_p50_ms"] = ms(h.Quantile(0.50))
	e["event_p90_ms"] = ms(h.Quantile(0.90))
	e["event_p99_ms"] = ms(h.Quantile(0.99))
	e["event_p999_ms"] = ms(h.Quantile(0.999))
	e["event_max_ms"] = ms(h.Max())
}
