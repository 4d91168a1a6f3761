package recipe_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/dkv-io/dkv/client/recipe"
)

// BenchmarkFlagEvaluate: local evaluations of a flag with a rule and a
// rollout, from parallel goroutines; reports evaluations/s.
//
//	go test -run '^$' -bench BenchmarkFlagEvaluate -benchmem ./client/recipe/
func BenchmarkFlagEvaluate(b *testing.B) {
	c := openStoreB(b)
	fl, err := recipe.NewFlags(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	defer fl.Close()
	f := boolFlag("bench")
	f.Rules = []recipe.FlagRule{{Attribute: "country", Op: recipe.OpIn, Values: []string{"NO", "SE"}, Variant: "on"}}
	f.Rollout = &recipe.FlagRollout{Variant: "on", Percent: 25}
	rev, err := recipe.SetFlag(context.Background(), c, f)
	if err != nil {
		b.Fatal(err)
	}
	if err := fl.WaitForRevision(context.Background(), rev); err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	attrs := map[string]string{"country": "FR"}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			fl.Bool("bench", keys[i&1023], attrs, false)
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "evals/s")
}
