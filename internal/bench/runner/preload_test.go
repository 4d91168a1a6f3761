package runner

import (
	"context"
	"testing"
)

// A preload cut off with batches [0, L) written and some of the next
// PreloadWindow in flight resumes at or below L and never past it; a
// key space with holes below the boundary (written some other way) is
// preloaded from the start.
func TestResumeFrom(t *testing.T) {
	const batches = 1000
	for _, tc := range []struct {
		name    string
		written func(j int) bool
		// The resume point must lie in [lo, hi]: hi is the first batch
		// not written, lo is hi less the window (the preload rewrites
		// at most that many batches it had already written).
		lo, hi int
	}{
		{"nothing written", func(int) bool { return false }, 0, 0},
		{"first batches only", func(j int) bool { return j < 40 }, 0, 0},
		{"cut off at 500, window ragged", func(j int) bool { return j < 500 || (j < 500+PreloadWindow && j%3 == 0) }, 500 - PreloadWindow, 500},
		{"cut off at 700, window empty", func(j int) bool { return j < 700 }, 700 - PreloadWindow, 700 - PreloadWindow},
		{"all but the last in-flight batch", func(j int) bool { return j != batches-1 }, batches - 1 - PreloadWindow, batches - 1 - PreloadWindow},
		{"holes below the boundary", func(j int) bool { return j%2 == 0 || j < 10 }, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Batches of 10 keys; a written batch has all its keys.
			const per = 10
			present := func(_ context.Context, k int) (bool, error) { return tc.written(k / per), nil }
			count := func(_ context.Context, n int) (int64, error) {
				var c int64
				for k := range n {
					if tc.written(k / per) {
						c++
					}
				}
				return c, nil
			}
			got, err := ResumeFrom(context.Background(), batches, per, present, count)
			if err != nil {
				t.Fatal(err)
			}
			// Whatever the boundary found, every batch below the
			// resume point must be written: nothing is skipped.
			for j := range got {
				if !tc.written(j) {
					t.Fatalf("resumes at %d, but batch %d was never written", got, j)
				}
			}
			if got < tc.lo || got > tc.hi {
				t.Errorf("resumes at batch %d, want it in [%d, %d]", got, tc.lo, tc.hi)
			}
		})
	}
}
