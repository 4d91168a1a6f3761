// Package grpcapi holds the implementations of DKV's own gRPC services
// (api/dkv/v1). They see the node through two interfaces. Node offers
// what the data services need (KV, Query, Store, Lease, Lock, Watch,
// Queue, RateLimit): its propose path, its linearizable wait and read
// view (a state.Reader), the caller's authorization and store, the lease
// renewer, the lock waiters and streams on the watch hub. Each of those
// handlers validates a request, then either proposes it through raft and
// returns the applied result, or waits for a linearizable read and
// answers from the applied state.
//
// Admin offers what the services about the member itself need beyond
// Node (Cluster, Maintenance, Auth): its raft status and membership
// changes, its database (hash, checkpoint, defragmentation), its alarms,
// the login guard and auth changes. Those operations stay the node's;
// the handlers here validate, read the member table and the auth view,
// map, and answer. The authorization of every call (the interceptors,
// the permission checks) is the node's too.
//
// It knows nothing of the Server, its listeners and loops, raft or the
// storage engine. The server builds an API over its node (New) and
// registers it on its gRPC server (Register); etcd's API (package
// etcdapi) is served over the same services.
//
// Errors are domain errors (*dkverr.Error, context errors); the server's
// interceptors map them to the wire once, for every service.
package grpcapi
