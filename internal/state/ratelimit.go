package state

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/ratelimit"
	"google.golang.org/protobuf/proto"
)

// The rate limiter's decision (package ratelimit). It lives outside the
// MVCC keyspace: a decision is no key change, so it takes no revision and
// sends no watch event. Its time is the entry's, never this member's
// clock.
var rateLimitCommand = Command{
	name: "rate_limit",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return ratelimit.Validate(req.GetRateLimit(), l.MaxKeyBytes)
	},
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// A decision changes the bucket, and its answer tells the
		// bucket's state: the limiter's key needs what a counter's does.
		return []Need{{auth.Read | auth.Write, auth.Key(msg.(*dkvpb.RateLimitRequest).GetKey()), "ratelimit"}}, nil
	},
	growsData: always,
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		rl, err := ratelimit.Apply(b, req.GetRateLimit(), req.GetTimeUnixNano())
		must(err)
		rl.Header = &dkvpb.ResponseHeader{Revision: m.kv.Revision()}
		return Result{Resp: rl, Revision: m.kv.Revision()}
	},
}
