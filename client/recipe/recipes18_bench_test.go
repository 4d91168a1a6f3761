package recipe_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// BenchmarkCacheCatchUp100k: the time a new (or restarted) instance's
// cache takes to catch up with a prefix of 100,000 keys (100-byte
// values): NewCache reads the snapshot and hands every key to OnAdd.
//
//	go test -run '^$' -bench CacheCatchUp100k -benchtime 3x ./client/recipe/
func BenchmarkCacheCatchUp100k(b *testing.B) {
	c := openStoreB(b)
	ctx := context.Background()
	const keys, perTxn = 100_000, 100
	val := make([]byte, 100)
	for i := 0; i < keys; i += perTxn {
		ops := make([]client.Op, 0, perTxn)
		for j := i; j < i+perTxn; j++ {
			ops = append(ops, client.OpPut(fmt.Sprintf("big/%06d", j), val))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		var added atomic.Int64
		cache, err := recipe.NewCache(ctx, c, "big/", recipe.WithCacheHandler(recipe.CacheHandler{
			OnAdd: func(*client.KeyValue) { added.Add(1) },
		}))
		if err != nil {
			b.Fatal(err)
		}
		if n := cache.Len(); n != keys || added.Load() != keys {
			b.Fatalf("cache holds %d keys, %d OnAdd calls; want %d", n, added.Load(), keys)
		}
		cache.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/catch-up")
}

// BenchmarkSessionStore: session reads (Get) and atomic updates
// (Update) from parallel goroutines on an embedded node, each on a
// session of its own ("spread") or all on one hot session ("hot", where
// Updates batch); reports ops/s.
//
//	go test -run '^$' -bench SessionStore -benchtime 3s ./client/recipe/
func BenchmarkSessionStore(b *testing.B) {
	c := openStoreB(b)
	s, err := recipe.NewSessionStore(c)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const tokens = 64
	data := make([]byte, 200)
	for i := range tokens {
		if err := s.Put(ctx, "t"+strconv.Itoa(i), data, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	touch := func(old []byte) ([]byte, error) {
		out := append([]byte(nil), old...)
		out[0]++
		return out, nil
	}
	var next atomic.Int64
	token := func(hot bool) string {
		if hot {
			return "t0"
		}
		return "t" + strconv.Itoa(int(next.Add(1)%tokens))
	}
	for _, bc := range []struct {
		name   string
		hot    bool
		update bool
	}{{"Get/spread", false, false}, {"Update/spread", false, true}, {"Update/hot", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism(4) // 4 x GOMAXPROCS goroutines: requests of many web handlers
			b.RunParallel(func(pb *testing.PB) {
				tok := token(bc.hot)
				for pb.Next() {
					var err error
					if bc.update {
						_, err = s.Update(ctx, tok, touch)
					} else {
						_, _, err = s.Get(ctx, tok)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
