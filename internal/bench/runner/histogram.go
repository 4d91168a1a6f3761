package runner

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records latencies in log-linear buckets, HDR style: values are
// grouped by their power of two and each power of two is split into
// linear sub-buckets, so every recorded value is reported with a relative
// error below 1/128 (under 0.8%) while the whole range from 1ns
// to ~292 years fits in a fixed array. The zero value is ready to use. It is
// not safe for concurrent use: the runner keeps one per client and merges.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

const (
	subBucketBits = 8
	subBuckets    = 1 << subBucketBits // 256: bucket width / value < 1/128
	// Values below subBuckets get exact buckets; each further power of two
	// (up to 2^63) adds subBuckets/2 buckets (the upper half of its range).
	histBuckets = subBuckets + (63-subBucketBits+1)*subBuckets/2
)

// bucketOf maps v >= 0 to its bucket index.
func bucketOf(v int64) int {
	if v < subBuckets {
		return int(v)
	}
	// e is the bit length beyond subBucketBits; the top subBucketBits bits
	// of v pick the sub-bucket (always in the upper half: >= subBuckets/2).
	e := bits.Len64(uint64(v)) - subBucketBits
	sub := int(v >> uint(e))
	return subBuckets + (e-1)*subBuckets/2 + (sub - subBuckets/2)
}

// bucketRange returns the inclusive [lo, hi] value range of bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < subBuckets {
		return int64(i), int64(i)
	}
	j := i - subBuckets
	e := j/(subBuckets/2) + 1
	sub := int64(j%(subBuckets/2) + subBuckets/2)
	lo = sub << uint(e)
	hi = lo + (int64(1) << uint(e)) - 1
	return lo, hi
}

// Record adds one latency. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max are exact.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest recorded value, exact.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is exact up to float rounding.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Quantile returns the value at quantile q in [0, 1]: the smallest recorded
// value v such that at least q of the values are <= v, reported as the
// upper end of its bucket (clamped to the exact min and max), so it never
// understates a latency by more than the bucket width.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketRange(i)
			hi = min(hi, h.max)
			hi = max(hi, h.min)
			return time.Duration(hi)
		}
	}
	return time.Duration(h.max)
}
