package recipe_test

import (
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// BenchmarkSemaphoreAcquireRelease: one uncontended acquire + release on
// an embedded node (3 writes and a list per op).
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	c := openEmbedded(b)
	sem, err := recipe.NewSemaphore(newSession(b, c), "bench/sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	ctx := testCtx(b)
	for b.Loop() {
		p, err := sem.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRateLimitAllow: decisions/s from parallel callers on an
// embedded node (one raft round trip each).
func BenchmarkRateLimitAllow(b *testing.B) {
	c := openEmbedded(b)
	l, err := recipe.NewLimiter(c, "bench/rl", client.RateLimit{Limit: 1_000_000_000, Period: time.Second, Burst: 1000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := testCtx(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Allow(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRateLimitLocalBatch: the same with local mode taking 100
// tokens per round trip.
func BenchmarkRateLimitLocalBatch(b *testing.B) {
	c := openEmbedded(b)
	l, err := recipe.NewLimiter(c, "bench/rl-local", client.RateLimit{Limit: 1_000_000_000, Period: time.Second, Burst: 1000}, recipe.WithLocalBatch(100))
	if err != nil {
		b.Fatal(err)
	}
	ctx := testCtx(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Allow(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
