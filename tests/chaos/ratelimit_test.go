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
