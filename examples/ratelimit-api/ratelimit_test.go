package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server/embed"
)

// TestOneLimitAcrossThreeInstances sends N requests for one API key
// across the three instances as fast as eight callers can. The fault is
// the spread itself: each instance sees a third of the traffic, so a
// per-instance limit would let three times the rate through. Whatever the
// machine's speed, over the elapsed time W the instances together allow
// at most burst + limit × W / period (the GCRA bound over any interval of
// decision times, which lie inside W), at least the burst (the bucket
// starts full), and every refusal is a 429 with a Retry-After of at least
// a second. A caller that waits its Retry-After is then let through.
func TestOneLimitAcrossThreeInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 150
	o := options{
		rate:   client.RateLimit{Limit: 5, Period: time.Second, Burst: 5},
		window: 15 * time.Second, maxRequests: n, callers: 8,
		bucketPrefix: "t/ratelimit/", out: io.Discard,
	}
	res, err := run(ctx, c, o)
	if err != nil {
		t.Fatal(err)
	}
	allowed, refused := res.total()
	t.Logf("%d allowed, %d refused in %v (bound %.1f); by instance: allowed %v, refused %v",
		allowed, refused, res.elapsed, res.bound, res.allowed, res.refused)
	if allowed+refused+res.other != n {
		t.Fatalf("%d answers counted, %d requests sent", allowed+refused+res.other, n)
	}
	if res.other != 0 {
		t.Errorf("%d requests got neither 200 nor 429", res.other)
	}
	if float64(allowed) > res.bound {
		t.Errorf("%d requests allowed in %v; the shared limit allows at most %.1f", allowed, res.elapsed, res.bound)
	}
	if allowed < int(o.rate.Burst) {
		t.Errorf("%d requests allowed; a full bucket allows at least the burst, %d", allowed, o.rate.Burst)
	}
	if res.refusedBadly != 0 {
		t.Errorf("%d of %d refusals lacked 429 with a Retry-After of at least 1s", res.refusedBadly, refused)
	}
	for i := range 3 {
		if res.allowed[i]+res.refused[i] != n/3 {
			t.Errorf("instance %d answered %d requests, want %d (round-robin)", i, res.allowed[i]+res.refused[i], n/3)
		}
	}
	if res.politeStatus != http.StatusOK || res.politeWaited < time.Second {
		t.Errorf("polite caller waited %v and got %d, want a wait of at least 1s and 200", res.politeWaited, res.politeStatus)
	}
}
