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

// BenchmarkQueueBatchRoundTrip is BenchmarkQueueRoundTrip with batches
// of 32: EnqueueBatch, ClaimBatch, AckBatch; one op is one job.
func BenchmarkQueueBatchRoundTrip(b *testing.B) {
	c := openStoreB(b)
	q, err := recipe.NewQueue(c, "bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	payloads := make([][]byte, 32)
	for i := range payloads {
		payloads[i] = []byte("payload")
	}
	b.ResetTimer()
	for n := 0; n < b.N; {
		if _, err := q.EnqueueBatch(ctx, payloads); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < len(payloads); {
			jobs, err := q.ClaimBatch(ctx, len(payloads))
			if err != nil {
				b.Fatal(err)
			}
			for _, err := range q.AckBatch(ctx, jobs) {
				if err != nil {
					b.Fatal(err)
				}
			}
			got += len(jobs)
		}
		n += len(payloads)
	}
}
