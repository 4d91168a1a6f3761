package tests

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

var flagInstances = flag.Int("flags.instances", 100, "watching instances in TestFlagPropagation and BenchmarkFlagPropagation")

// flagFleet is n instances watching the flags of a 3-node cluster, each
// with a client of its own (spread over the members) and a Flags
// evaluator. For every instance it records when each version of the
// flag "prop" reached it: its cache's handler runs just before the
// evaluator swaps in the new flags, so that is when an evaluation there
// starts to see the change.
type flagFleet struct {
	writer *client.Client
	fls    []*recipe.Flags

	mu      sync.Mutex
	arrived []map[int64]time.Time // per instance: flag ModRevision -> arrival
}

func newFlagFleet(tb testing.TB, n int) *flagFleet {
	tb.Helper()
	c3 := servertest.NewCluster(tb, 3, server.Config{})
	c3.WaitLeader()
	ff := &flagFleet{writer: servertest.Client(tb, c3.Nodes...), arrived: make([]map[int64]time.Time, n)}
	for i := range n {
		nodes := append(append([]*servertest.Node{}, c3.Nodes[i%3:]...), c3.Nodes[:i%3]...)
		cl := servertest.Client(tb, nodes...)
		ff.arrived[i] = map[int64]time.Time{}
		seen := func(kv *client.KeyValue) {
			if kv.Key != recipe.FlagPrefix+"prop" {
				return
			}
			now := time.Now()
			ff.mu.Lock()
			ff.arrived[i][kv.ModRevision] = now
			ff.mu.Unlock()
		}
		h := recipe.CacheHandler{OnAdd: seen, OnUpdate: func(_, cur *client.KeyValue) { seen(cur) }}
		ctx, cancel := context.WithCancel(context.Background())
		tb.Cleanup(cancel)
		fl, err := recipe.NewFlags(ctx, cl, recipe.WithFlagsCacheOptions(recipe.WithCacheHandler(h)))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(fl.Close)
		ff.fls = append(ff.fls, fl)
	}
	return ff
}

// flip sets "prop" to on (or off) and returns, per instance, how long
// after the SetFlag call began the change reached it; every instance
// must then evaluate the new value.
func (ff *flagFleet) flip(tb testing.TB, on bool) []time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	variant := "off"
	if on {
		variant = "on"
	}
	f := &recipe.Flag{Key: "prop", Type: recipe.FlagBool, Enabled: true,
		Variants:       map[string]json.RawMessage{"on": json.RawMessage("true"), "off": json.RawMessage("false")},
		DefaultVariant: variant, OffVariant: "off"}
	start := time.Now()
	rev, err := recipe.SetFlag(ctx, ff.writer, f)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]time.Duration, len(ff.fls))
	for i, fl := range ff.fls {
		if err := fl.WaitForRevision(ctx, rev); err != nil {
			tb.Fatalf("instance %d never saw revision %d: %v", i, rev, err)
		}
		if got := fl.Bool("prop", "user-1", nil, !on); got != on {
			tb.Fatalf("instance %d at revision %d evaluates %v, want %v", i, fl.Revision(), got, on)
		}
		// WaitForRevision may return while the handler is being called.
		var at time.Time
		testutil.Eventually(tb, 10*time.Second, fmt.Sprintf("instance %d's handler call for revision %d", i, rev), func() bool {
			ff.mu.Lock()
			defer ff.mu.Unlock()
			var ok bool
			at, ok = ff.arrived[i][rev]
			return ok
		})
		out[i] = at.Sub(start)
	}
	return out
}

func pcts(ds []time.Duration) (p50, p99, maxd time.Duration) {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return at(0.50), at(0.99), s[len(s)-1]
}

// TestFlagPropagation: a flag change reaches 100 watching
// instances; every instance evaluates each of 20 changes, and the
// time from the SetFlag call to each instance is reported (not
// asserted: the machine is shared).
//
//	go test ./tests -run TestFlagPropagation -v
func TestFlagPropagation(t *testing.T) {
	n := *flagInstances
	ff := newFlagFleet(t, n)
	var all []time.Duration
	for round := range 20 {
		all = append(all, ff.flip(t, round%2 == 0)...)
	}
	p50, p99, mx := pcts(all)
	t.Logf("flag change to %d instances (3 members), %d deliveries: median %v, p99 %v, max %v", n, len(all), p50, p99, mx)
}

// BenchmarkFlagPropagation: one flag change per iteration, watched by
// 100 instances; reports the median and p99 time from the SetFlag call
// until the change reached an instance.
//
//	go test ./tests -run '^$' -bench BenchmarkFlagPropagation -benchtime 50x
func BenchmarkFlagPropagation(b *testing.B) {
	ff := newFlagFleet(b, *flagInstances)
	var all []time.Duration
	b.ResetTimer()
	for i := range b.N {
		all = append(all, ff.flip(b, i%2 == 0)...)
	}
	b.StopTimer()
	p50, p99, _ := pcts(all)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}
