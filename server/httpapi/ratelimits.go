package httpapi

import (
	"bytes"
	"net/http"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/ratelimit"
)

// maxRateLimitsListed bounds one GET /v1/ratelimits answer.
const maxRateLimitsListed = 1000

// RateLimitEntry is one bucket in GET /v1/ratelimits. A bucket stores
// only its GCRA state; its limit, period and burst come with each
// request and are not stored, so the answer has times, not token counts.
type RateLimitEntry struct {
	Key string `json:"key"`
	// LastUnixMs is when the last decision on the bucket was made (the
	// raft entry's time).
	LastUnixMs int64 `json:"last_unix_ms"`
	// TatUnixMs is the bucket's theoretical arrival time: it is full
	// (every token back) from then on.
	TatUnixMs int64 `json:"tat_unix_ms"`
	// FullInMs is how long from now_unix_ms until the bucket is full: 0
	// when it is.
	FullInMs int64 `json:"full_in_ms"`
}

type RateLimitListResponse struct {
	NowUnixMs int64            `json:"now_unix_ms"` // this member's clock
	Buckets   []RateLimitEntry `json:"buckets"`
	More      bool             `json:"more"`
}

// RateLimits serves GET /v1/ratelimits[?prefix=P][&limit=N][&store=S]:
// the rate limiter's buckets whose key starts with P, in key order, each
// with its last decision time and when it is full again. With auth on,
// only buckets whose key the caller may read are listed.
func (a *API) RateLimits(w http.ResponseWriter, r *http.Request) {
	a.serveList(w, r, maxRateLimitsListed, a.listRateLimits)
}

// listRateLimits lists the buckets of GET /v1/ratelimits.
func (a *API) listRateLimits(q listQuery) (any, error) {
	type bucket struct {
		key []byte
		st  ratelimit.State
	}
	var all []bucket
	err := q.view.RateLimits(q.prefix, func(k []byte, st ratelimit.State) bool {
		all = append(all, bucket{bytes.Clone(k), st})
		return len(all) <= 10*maxRateLimitsListed // enough to fill a page past unreadable keys
	})
	if err != nil {
		return nil, dkverr.New(dkverr.Internal, "%v", err)
	}
	now := time.Now().UnixNano()
	resp := RateLimitListResponse{NowUnixMs: now / 1e6, Buckets: []RateLimitEntry{}}
	for _, b := range all {
		key, own := q.store.Strip(b.key)
		if !own {
			continue // another store's bucket: the default store's empty prefix reaches them
		}
		// Permissions apply to the physical (store-mapped) key.
		if _, err := a.n.Authorize(q.ctx, dkvpb.KV_Range_FullMethodName, &dkvpb.RangeRequest{Key: b.key}); err != nil {
			if dkverr.CodeOf(err) == dkverr.Unauthenticated {
				return nil, a.n.WireError(err)
			}
			continue // not the caller's to see
		}
		if len(resp.Buckets) == q.limit {
			resp.More = true
			break
		}
		resp.Buckets = append(resp.Buckets, RateLimitEntry{Key: string(key), LastUnixMs: b.st.Last / 1e6,
			TatUnixMs: b.st.TAT / 1e6, FullInMs: (max(0, b.st.TAT-now) + 999_999) / 1e6})
	}
	if len(all) > 10*maxRateLimitsListed {
		resp.More = true
	}
	return resp, nil
}
