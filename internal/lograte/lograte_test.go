package lograte

import (
	"testing"
	"time"
)

func TestOnePerKindPerInterval(t *testing.T) {
	now := time.Unix(0, 0)
	l := New(10 * time.Second)
	l.SetClock(func() time.Time { return now })
	if n, ok := l.Allow("a"); !ok || n != 0 {
		t.Fatalf("first a: %d %v, want 0 true", n, ok)
	}
	for range 5 {
		if _, ok := l.Allow("a"); ok {
			t.Fatal("a again within the interval was let through")
		}
	}
	if _, ok := l.Allow("b"); !ok {
		t.Fatal("another kind was held back by a")
	}
	now = now.Add(10 * time.Second)
	if n, ok := l.Allow("a"); !ok || n != 5 {
		t.Fatalf("a after the interval: %d %v, want 5 held back, true", n, ok)
	}
}
