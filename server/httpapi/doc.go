// Package httpapi is the node's HTTP port, but for its listener, TLS and
// the node's own health and metrics endpoints: the HTTP/JSON gateway
// over DKV's gRPC services (/v1/...) and etcd's (/v3/...), with its
// strict JSON decoding and body limits; the plain-value key endpoint
// (/v1/keys/KEY); GET /v1/watch; the gateway's OpenAPI document
// (/v1/openapi.json, api/dkv/v1/openapi); the dashboard (/ui/) and its
// endpoints (GET /v1/locks and /v1/ratelimits, one list implementation;
// /v1/cluster/progress and /v1/cluster/statuses; /v1/auth/whoami); the
// guard that keeps other web origins and rebound host names out
// (Guard); and the one mapping of DKV outcomes to HTTP statuses (Error,
// Status).
//
// It reaches the node only through Node (authorization, the request's
// store, the KV service, linearizable reads, the applied state as a
// state.Reader, lease deadlines, replication progress, other members'
// statuses) and the in-process gRPC connection the node hands Handler.
// It knows nothing of the Server, its listeners and loops, raft, or the
// storage engine.
package httpapi
