// Package httpapi serves the node's dashboard and listing endpoints over
// plain HTTP/JSON: GET /v1/locks and /v1/ratelimits (one list
// implementation: prefix and limit, the request's store, a linearizable
// read, one consistent view), /v1/cluster/progress and
// /v1/cluster/statuses, and /v1/auth/whoami. It also holds the guard in
// front of the whole HTTP port that keeps other web origins and rebound
// host names out (Guard), and the one mapping of DKV outcomes to HTTP
// statuses (Error, Status) every HTTP path answers with.
//
// It reaches the node only through Node: authorization, the request's
// store, linearizable reads, the applied state (state.Reader), lease
// deadlines, replication progress and other members' statuses. It knows
// nothing of the Server, its listeners and loops, raft, or the storage
// engine: it reads the applied state only through state.Reader.
package httpapi
