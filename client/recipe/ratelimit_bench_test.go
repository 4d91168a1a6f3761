package recipe_test

import (
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// BenchmarkRateLimitAllow: decisions/s from parallel callers on an
// embedded node (one raft round trip each).
func BenchmarkRateLimitAllow(b *testing.B) {
	c := syncTestNode(b)
	l, err := recipe.NewLimiter(c, "bench/rl", client.RateLimit{Limit: 1_000_000_000, Period: time.Second, Burst: 1000})
	if err != nil {
		b.Fatal(err)
	}
	ctx := syncTestCtx(b)
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
	c := syncTestNode(b)
	l, err := recipe.NewLimiter(c, "bench/rl-local", client.RateLimit{Limit: 1_000_000_000, Period: time.Second, Burst: 1000}, recipe.WithLocalBatch(100))
	if err != nil {
		b.Fatal(err)
	}
	ctx := syncTestCtx(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Allow(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
