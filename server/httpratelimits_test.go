package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestHTTPRateLimitsListsBuckets: GET /v1/ratelimits lists the buckets
// under a prefix with their last decision time and when they are full.
func TestHTTPRateLimitsListsBuckets(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{Name: "n1"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc := dkvpb.NewRateLimitClient(conn)
	before := time.Now().UnixMilli()
	for _, k := range []string{"api/ann", "api/bob", "other"} {
		// 1 token an hour, burst 5: taking 2 leaves the bucket 2 hours from full.
		if _, err := rc.Allow(ctx, &dkvpb.RateLimitRequest{Key: []byte(k), Limit: 1, PeriodMs: 3600_000, Burst: 5, N: 2}); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now().UnixMilli()
	// A bucket of a named store is not the default store's to list.
	if _, err := dkvpb.NewStoreClient(conn).Create(ctx, &dkvpb.StoreCreateRequest{Name: "other-team"}); err != nil {
		t.Fatal(err)
	}
	octx := metadata.AppendToOutgoingContext(ctx, storeHeader, "other-team")
	if _, err := rc.Allow(octx, &dkvpb.RateLimitRequest{Key: []byte("api/carl"), Limit: 1, PeriodMs: 3600_000, Burst: 5, N: 2}); err != nil {
		t.Fatal(err)
	}
	var got rateLimitListResponse
	if code := getJSON(t, base+"/v1/ratelimits?prefix=api/", &got); code != 200 {
		t.Fatalf("GET /v1/ratelimits: %d", code)
	}
	if len(got.Buckets) != 2 || got.Buckets[0].Key != "api/ann" || got.Buckets[1].Key != "api/bob" {
		t.Fatalf("buckets under api/ = %+v, want api/ann and api/bob", got.Buckets)
	}
	b := got.Buckets[0]
	if b.LastUnixMs < before || b.LastUnixMs > after {
		t.Errorf("last decision at %d, want in [%d, %d]", b.LastUnixMs, before, after)
	}
	if b.FullInMs <= 3600_000 || b.FullInMs > 2*3600_000 {
		t.Errorf("full in %d ms, want about 2 hours (2 tokens at 1 an hour)", b.FullInMs)
	}
	if code := getJSON(t, base+"/v1/ratelimits", &got); code != 200 || len(got.Buckets) != 3 || got.Buckets[2].Key != "other" {
		t.Errorf("every bucket of the default store: %d %+v, want api/ann, api/bob, other (not other-team's)", code, got.Buckets)
	}
	if code := getJSON(t, base+"/v1/ratelimits?limit=1", &got); code != 200 || len(got.Buckets) != 1 || !got.More {
		t.Errorf("limit=1: %d %+v, want one bucket and more", code, got)
	}
	if code := getJSON(t, base+"/v1/ratelimits?limit=x", nil); code != 400 {
		t.Errorf("limit=x: %d, want 400", code)
	}
}
