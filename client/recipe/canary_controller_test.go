package recipe_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
)

// A canary that is healthy at 5% and starts failing at 25% is rolled back
// to 0%; each decision is recorded with its inputs; a deposed
// controller's step is refused.
func TestCanaryControllerRollsBackFaultyCanary(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	var mu sync.Mutex
	var percents []int
	setPercent := func(ctx context.Context, p int, fence client.LockHandle) error {
		// The flag write, fenced like every leader write.
		if _, err := c.Put(ctx, "flags/checkout", []byte{byte(p)}, client.WithLock(fence)); err != nil {
			return err
		}
		mu.Lock()
		percents = append(percents, p)
		mu.Unlock()
		return nil
	}
	cc := recipe.NewCanaryController(c, "checkout", nil, recipe.CanaryThresholds{}, setPercent)
	s1 := newSession(t, c)
	l, err := concurrency.NewElection(s1, "ctl/canary").Campaign(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(variant string, n, failures int) {
		for i := range n {
			if err := recipe.ReportCanary(ctx, c, "checkout", variant, i < failures); err != nil {
				t.Fatal(err)
			}
		}
	}
	step := func(want string) {
		t.Helper()
		rec, err := cc.Step(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Decision != want {
			t.Fatalf("decision %+v, want %s", rec, want)
		}
	}
	serve("baseline", 1000, 5) // 0.5%
	serve("canary", 100, 0)
	step("wait") // 100 canary requests < 200
	serve("canary", 150, 0)
	step("proceed")          // 5% -> 25%
	serve("canary", 250, 40) // now 40/500 = 8%
	step("rollback")
	if _, err := cc.Step(ctx, l); !errors.Is(err, recipe.ErrRolloutFinished) {
		t.Fatalf("step after rollback: %v", err)
	}
	mu.Lock()
	if len(percents) != 2 || percents[0] != 25 || percents[1] != 0 {
		t.Fatalf("flag percentages set: %v, want [25 0]", percents)
	}
	mu.Unlock()
	recs, err := recipe.Decisions(ctx, c, "checkout")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d decisions recorded, want 3", len(recs))
	}
	last := recs[2]
	if last.Percent != 25 || last.Next != 0 || last.Canary != (recipe.VariantStats{Requests: 500, Errors: 40}) ||
		last.Baseline != (recipe.VariantStats{Requests: 1000, Errors: 5}) || last.Revision == 0 || last.Term != l.Term() {
		t.Fatalf("last record %+v", last)
	}

	// A deposed controller is refused and records nothing.
	cc2 := recipe.NewCanaryController(c, "again", nil, recipe.CanaryThresholds{}, setPercent)
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := concurrency.NewElection(newSession(t, c), "ctl/canary").Campaign(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve("baseline", 10, 0)
	if _, err := cc2.Step(ctx, l); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("deposed step: %v, want ErrLocked", err)
	}
	if recs, err := recipe.Decisions(ctx, c, "again"); err != nil || len(recs) != 0 {
		t.Fatalf("deposed step recorded %v, %v", recs, err)
	}
	if _, err := cc2.Step(ctx, l2); err != nil {
		t.Fatalf("new leader's step: %v", err)
	}
}
