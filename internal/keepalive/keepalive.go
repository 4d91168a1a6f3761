// Package keepalive holds what one DKV lease keep-alive request may name:
// the rule the member's Lease service (server/grpcapi) enforces and dkv
// proxy (internal/proxy) applies before a request reaches an upstream
// stream other clients share. One function, so that the proxy refuses
// exactly what a member refuses: a request the proxy let through and the
// member refused would end the shared stream for every client on it, and
// one the proxy refused and a member would take would break a client
// only behind a proxy.
//
// It imports only internal/dkverr, so the proxy links it without the
// server (TestLayering).
package keepalive

import "github.com/dkv-io/dkv/internal/dkverr"

// MaxIDs is the most leases one keep-alive request may name.
const MaxIDs = 20000

// ValidIDs reports why a keep-alive request naming ids is refused
// (InvalidInput), or nil: it names at least one lease, at most MaxIDs,
// each id positive.
func ValidIDs(ids []int64) error {
	if len(ids) == 0 {
		return dkverr.New(dkverr.InvalidInput, "keep-alive names no lease")
	}
	if len(ids) > MaxIDs {
		return dkverr.New(dkverr.InvalidInput, "keep-alive names %d leases; the limit per request is %d", len(ids), MaxIDs)
	}
	for _, id := range ids {
		if id <= 0 {
			return dkverr.New(dkverr.InvalidInput, "lease id is %d; it must be positive", id)
		}
	}
	return nil
}
