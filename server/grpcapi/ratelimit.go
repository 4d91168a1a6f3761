package grpcapi

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// rateLimitService implements dkvpb.RateLimitServer: every decision is one
// raft command (internal/ratelimit), so it is exact across the cluster.
type rateLimitService struct {
	dkvpb.UnimplementedRateLimitServer
	n Node
}

// Allow stamps this member's clock into the command: apply decides at that
// time (never earlier than an earlier decision on the key), so every
// member computes the same decision.
func (r *rateLimitService) Allow(ctx context.Context, req *dkvpb.RateLimitRequest) (*dkvpb.RateLimitResponse, error) {
	return Propose[*dkvpb.RateLimitResponse](ctx, r.n, &dkvpb.InternalRequest{
		TimeUnixNano: time.Now().UnixNano(),
		Request:      &dkvpb.InternalRequest_RateLimit{RateLimit: req},
	})
}
