// Package tlsutil holds DKV's TLS plumbing: the settings every port shares
// (minimum version, cipher suites), a key pair that is re-read when its
// files change so certificates rotate without a restart, and a small
// certificate authority for dev-cluster --secure and tests.
//
// Callers: server (client and peer listeners, member-to-member dials),
// internal/transport (peer dials, through the tls.Config server builds),
// internal/cli (serve flags, client flags, dev-cluster --secure) and tests.
// Nothing here is on a request path: a Reloader costs one stat per TLS
// handshake, and none per request.
package tlsutil
