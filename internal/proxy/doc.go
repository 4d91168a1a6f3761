// Package proxy is `dkv proxy`: a process on an application host that
// speaks DKV's gRPC API (and the etcd v3 API the members serve beside it)
// to local clients and forwards to the cluster, coalescing watches.
//
// Every gRPC method the proxy does not handle itself is forwarded as raw
// bytes (forward.go): the caller's metadata (token, authorization, store,
// session) goes upstream unchanged, and the member's header, trailer and
// status come back unchanged, so any DKV or etcd client works through it.
//
// DKV's Watch service is the one the proxy answers itself (watch.go),
// and etcd's Watch with it (etcdwatch.go: translated at the edge of the
// local stream as a member's etcd API translates it onto DKV's watch):
// local watches of either API with the same selection, the same options
// and the same caller metadata share one upstream DKV watch (a group).
// Invariants:
//
//   - A group is shared only by callers presenting identical metadata, so
//     a token never sees events through a group that it could not see by
//     watching directly: the member checked that token for that range.
//   - Every local watch gets every event of its range from its start, in
//     order, once: a group broadcasts whole revisions only (fragments are
//     held until the last one), remembers the revision it has delivered
//     through, and after an upstream failure resumes after it on any
//     member. A watch joins a group only if the group will deliver every
//     revision the watch needs; otherwise it gets an upstream watch of its
//     own.
//   - The proxy never blocks a group on one slow local stream: a stream
//     that falls too far behind is ended with Unavailable, and its client
//     resumes from its revision, as after any disconnect.
//
// Serializable reads of the current revision (DKV's and etcd's Range)
// are answered from a cache bounded by bytes (cache.go), per caller
// identity, kept current by one upstream watch per identity over its
// keyspace (or, for an identity that may not watch it all, one upstream
// watch per cached range, cache_ranged.go); its invariants are in
// cache.go.
//
// Lease keep-alive streams (DKV's Lease.KeepAlive and etcd's
// Lease.LeaseKeepAlive) with the same caller metadata share one upstream
// stream of their kind (keepalive.go); its invariants are there.
//
// The proxy links neither the server nor the client package: it is gRPC
// in both directions plus the generated API.
package proxy
