package main

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
)

// TestCartSameOnEveryInstance is the scenario's claim: the Buch/Stift/Heft
// sequence shows the same cart on both instances and on a fresh one that
// replaced B, and 100 concurrent adds across both instances lose none.
func TestCartSameOnEveryInstance(t *testing.T) {
	ctx, env := proctest.Embedded(t, 60*time.Second)
	const adds = 100
	rep, err := Run(ctx, env, Config{Prefix: "shop/", ConcurrentAdds: adds, Log: exenv.NewLog(exenv.TestWriter(t.Logf))})
	if err != nil {
		t.Fatal(err)
	}
	two, three := []string{"Buch", "Stift"}, []string{"Buch", "Stift", "Heft"}
	want := []Cart{
		{"A", []string{"Buch"}}, {"B", two}, {"A", two}, {"B", two}, {"A", three},
		{"B2", three}, {"A", three},
	}
	if len(rep.Answers) != len(want) {
		t.Fatalf("%d answers, want %d: %v", len(rep.Answers), len(want), rep.Answers)
	}
	for i, w := range want {
		if got := rep.Answers[i]; got.Instance != w.Instance || !slices.Equal(got.Items, w.Items) {
			t.Errorf("answer %d: %s showed %v, want %s showing %v", i+1, got.Instance, got.Items, w.Instance, w.Items)
		}
	}
	got := slices.Clone(rep.AfterConcurrent)
	sort.Strings(got)
	wantAll := append([]string{}, three...)
	for i := range adds {
		wantAll = append(wantAll, fmt.Sprintf("pen-%03d", i))
	}
	sort.Strings(wantAll)
	if !slices.Equal(got, wantAll) {
		t.Errorf("after %d concurrent adds the cart holds %d items, want %d (each added item once): %v", adds, len(got), len(wantAll), got)
	}
	if !slices.Equal(rep.AfterConcurrent[:3], three) {
		t.Errorf("the cart starts %v, want %v first", rep.AfterConcurrent[:3], three)
	}
}
