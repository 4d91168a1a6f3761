package runner

import (
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: from the clock)")

func TestHistogramKnownInputs(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	if h.Count() != 1000 {
		t.Fatalf("count %d", h.Count())
	}
	if h.Min() != time.Microsecond || h.Max() != 1000*time.Microsecond {
		t.Fatalf("min %v max %v", h.Min(), h.Max())
	}
	if got, want := h.Mean(), 500500*time.Nanosecond; got != want {
		t.Fatalf("mean %v want %v", got, want)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{
		{0.5, 500 * time.Microsecond},
		{0.9, 900 * time.Microsecond},
		{0.99, 990 * time.Microsecond},
		{0.999, 999 * time.Microsecond},
		{1, 1000 * time.Microsecond},
	} {
		got := h.Quantile(c.q)
		// Reported as the bucket's upper end: never below the true value,
		// at most 1/128 above it.
		if got < c.want || float64(got-c.want) > float64(c.want)/128 {
			t.Errorf("q%v = %v, want %v (+<1/128)", c.q, got, c.want)
		}
	}
}

func TestHistogramSmallValuesExact(t *testing.T) {
	var h Histogram
	for _, v := range []int64{0, 1, 2, 3, 255} {
		h.Record(time.Duration(v))
	}
	if got := h.Quantile(0.5); got != 2 {
		t.Fatalf("p50 of {0,1,2,3,255} = %d, want 2", got)
	}
	if got := h.Quantile(0.8); got != 3 {
		t.Fatalf("p80 = %d, want 3", got)
	}
	var empty Histogram
	if empty.Quantile(0.99) != 0 || empty.Mean() != 0 {
		t.Fatal("empty histogram not zero")
	}
}

// TestHistogramMatchesSortedReference compares against the dumb reference:
// sort every value and index it.
func TestHistogramMatchesSortedReference(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0))
	var parts [4]Histogram
	var all []int64
	for i := range 20000 {
		// Log-uniform from 1ns to ~100s, like real latencies spread out.
		v := int64(1) << r.IntN(37)
		v += r.Int64N(v)
		parts[i%4].Record(time.Duration(v))
		all = append(all, v)
	}
	var h Histogram
	for i := range parts {
		h.Merge(&parts[i])
	}
	slices.Sort(all)
	for _, q := range []float64{0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 0.9999} {
		rank := int(float64(len(all))*q+0.999999) - 1
		want := all[rank]
		got := int64(h.Quantile(q))
		if got < want || float64(got-want) > float64(want)/128 {
			t.Errorf("q%v = %d, reference %d", q, got, want)
		}
	}
	if int64(h.Max()) != all[len(all)-1] || int64(h.Min()) != all[0] {
		t.Errorf("min/max %d/%d, reference %d/%d", h.Min(), h.Max(), all[0], all[len(all)-1])
	}
}

func TestBucketRangeInvertsBucketOf(t *testing.T) {
	for i := range histBuckets {
		lo, hi := bucketRange(i)
		if lo < 0 || hi < lo {
			continue // past the int64 range
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d: range [%d,%d] maps to %d,%d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
	}
}
