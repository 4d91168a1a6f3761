package bench

import (
	"testing"
)

// TestRateLimitWorkloadDecides: every op is one decision, a refusal
// included (a bucket of 50 refilling 1/s cannot allow 200).
func TestRateLimitWorkloadDecides(t *testing.T) {
	ep, _ := startServer(t)
	res := run(t, Options{Workload: "ratelimit", Endpoints: []string{ep}, Clients: 8, Total: 200, Keys: 1, RateLimit: 1, RateBurst: 50})
	if res.OK != 200 || len(res.Errors) != 0 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.Errors)
	}
}
