package server

import "github.com/dkv-io/dkv/server/httpapi"

// The answers of the endpoints httpapi serves, as this package's tests
// decode them.
type (
	lockListResponse      = httpapi.LockListResponse
	progressResponse      = httpapi.ProgressResponse
	rateLimitListResponse = httpapi.RateLimitListResponse
	memberStatusResponse  = httpapi.MemberStatusResponse
	whoamiResponse        = httpapi.WhoamiResponse
)

// The gateway's pieces this package's tests drive directly.
var (
	decodeStrict         = httpapi.DecodeStrict
	checkBytesFields     = httpapi.CheckBytesFields
	gatewayCNOptions     = httpapi.GatewayOptions
	gatewayHeaderMatcher = httpapi.HeaderMatcher
)
