package etcdcompat

import (
	"regexp"
	"testing"
)

// TestKeptOutputIsComplete pins how a wait step that leaves its child
// running records it. etcdctl lock prints the key it holds and then its
// empty value with two writes; the harness used to record whatever the
// child had written when until first matched, so the one step read
// "mylock2/<lease>\n" in one run and "mylock2/<lease>\n\n" in another
// (step 67 of the session, flagged with output that looked identical).
// Every snapshot of the child's stdout that the step accepts must record
// the same text.
func TestKeptOutputIsComplete(t *testing.T) {
	var kept []step
	for _, st := range session() {
		if st.keep {
			kept = append(kept, st)
		}
	}
	if len(kept) != 1 || kept[0].wait != "l1" {
		t.Fatalf("want one kept child (l1, the lock holder); have %d", len(kept))
	}
	re := regexp.MustCompile(kept[0].until)
	// What `etcdctl lock mylock2` has written at successive moments:
	// the key only, key and value, and (should it ever print more
	// before it is stopped) something after them.
	snapshots := []string{"mylock2/694d7a1b2c\n", "mylock2/694d7a1b2c\n\n", "mylock2/694d7a1b2c\n\nlater\n"}
	var recorded []string
	for _, s := range snapshots {
		if !re.MatchString(s) {
			continue // the harness keeps polling
		}
		recorded = append(recorded, keptOutput(s, re))
	}
	if len(recorded) == 0 {
		t.Fatalf("until %q matches none of etcdctl's outputs", kept[0].until)
	}
	for _, r := range recorded {
		if r != "mylock2/694d7a1b2c\n\n" {
			t.Errorf("recorded %q; want the key and its empty value, whatever the child wrote after them", r)
		}
	}
}
