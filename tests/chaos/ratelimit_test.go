package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
)

// TestRateWindowViolation: the checker accepts a history at the bound and
// reports one a token over it.
func TestRateWindowViolation(t *testing.T) {
	rate := client.RateLimit{Limit: 10, Period: time.Second, Burst: 3} // T = 100 ms
	ms := int64(time.Millisecond)
	// A full bucket's burst at 0, then one token per T: at the bound.
	ok := []RateAllowed{{N: 2, At: 0}, {N: 1, At: 0}}
	for i := int64(1); i <= 20; i++ {
		ok = append(ok, RateAllowed{N: 1, At: i * 100 * ms})
	}
	if msg := RateWindowViolation(ok, rate); msg != "" {
		t.Fatalf("a history at the bound was reported: %s", msg)
	}
	over := append(ok, RateAllowed{N: 1, At: 50 * ms})
	if msg := RateWindowViolation(over, rate); !strings.Contains(msg, "tokens allowed within") {
		t.Fatalf("one token over the bound was not reported: %q", msg)
	}
}

// TestSemaphoreViolation: the checker accepts holdings within n and
// reports a third overlapping holder of two permits, and a late write
// by a superseded slot holder.
func TestSemaphoreViolation(t *testing.T) {
	ok := []SemHolding{{Slot: 0, Token: 1, First: 10, Last: 20}, {Slot: 1, Token: 1, First: 15, Last: 30}, {Slot: 0, Token: 2, First: 21, Last: 25}}
	if msg := SemaphoreViolation(ok, 2); msg != "" {
		t.Fatalf("valid holdings reported: %s", msg)
	}
	three := append(ok, SemHolding{Slot: 2, Token: 1, First: 22, Last: 22})
	if msg := SemaphoreViolation(three, 2); !strings.Contains(msg, "3 permits in use at revision 22") {
		t.Fatalf("three holders of two permits: %q", msg)
	}
	late := append(ok, SemHolding{Slot: 1, Token: 2, First: 29, Last: 29})
	if msg := SemaphoreViolation(late, 3); !strings.Contains(msg, "slot 1") {
		t.Fatalf("overlapping holders of one slot: %q", msg)
	}
}
