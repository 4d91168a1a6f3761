package chaos

import (
	"context"
	"strings"
	"testing"
)

// TestExactlyOnceChecker: the checker accepts a counter between its
// acknowledged increments and those plus the unknown ones, and names a
// lost or a doubled increment.
func TestExactlyOnceChecker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		final int64
		want  string // "" or a substring of the one anomaly
	}{
		{"exact", 3, ""},
		{"one unknown applied", 4, ""},
		{"lost", 2, "was lost"},
		{"doubled", 5, "applied twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := NewRecorder()
			for _, o := range []string{"ok", "ok", "unknown", "ok", "failed"} {
				rec.Append(IncrementStream, Increment{Key: "k", Outcome: o})
			}
			rec.Append(IncrementFinalStream, IncrementFinal{Key: "k", Value: tc.final})
			got := ExactlyOnce{}.Check(context.Background(), &Run{History: rec, Stats: NewStats()})
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("final %d: anomalies %v, want none", tc.final, got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].Msg, tc.want)):
				t.Fatalf("final %d: anomalies %v, want one saying %q", tc.final, got, tc.want)
			}
		})
	}
}
