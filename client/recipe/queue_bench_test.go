package recipe_test

import (
	"context"
	"testing"

	"github.com/dkv-io/dkv/client/recipe"
)

// BenchmarkQueueRoundTrip measures one job's whole life on an embedded
// node: enqueue, claim, ack (one consumer, so no contention).
func BenchmarkQueueRoundTrip(b *testing.B) {
	c := openStoreB(b)
	q, err := recipe.NewQueue(c, "bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := q.Enqueue(ctx, []byte("payload")); err != nil {
			b.Fatal(err)
		}
		j, err := q.Claim(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Ack(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
