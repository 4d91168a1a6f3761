package httpapi

import (
	"net/http"

	"github.com/dkv-io/dkv/internal/httpguard"
)

// GuardConfig is what the guard allows besides the health probes
// (httpguard.Config).
type GuardConfig = httpguard.Config

// Guard wraps h in the guard against web pages (internal/httpguard, which
// dkv proxy's HTTP port shares), with c's hosts and origins.
func Guard(c GuardConfig, h http.Handler) http.Handler { return httpguard.New(c, h) }

// HostOnly is the lower-case host of a "host:port", "host", "[v6]:port"
// or "[v6]", without the port, brackets or a trailing dot.
func HostOnly(hostport string) string { return httpguard.HostOnly(hostport) }

// ParseOrigin checks a web origin (scheme://host[:port]) and normalizes
// it.
func ParseOrigin(o string) (string, error) { return httpguard.ParseOrigin(o) }
