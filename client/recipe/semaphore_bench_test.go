package recipe_test

import (
	"testing"

	"github.com/dkv-io/dkv/client/recipe"
)

// BenchmarkSemaphoreAcquireRelease: one uncontended acquire + release on
// an embedded node (3 writes and a list per op).
func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	c := syncTestNode(b)
	sem, err := recipe.NewSemaphore(syncTestSession(b, c), "bench/sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	ctx := syncTestCtx(b)
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
