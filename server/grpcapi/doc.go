// Package grpcapi holds the implementations of DKV's own gRPC services
// (api/dkv/v1) that need of the node only what Node offers: its propose
// path, its linearizable wait and read view (a state.Reader), the
// caller's authorization and store, the lease renewer, the lock waiters
// and streams on the watch hub. Each handler validates a request, then
// either proposes it through raft and returns the applied result, or
// waits for a linearizable read and answers from the applied state.
//
// It knows nothing of the Server, its listeners and loops, raft or the
// storage engine. The server builds an API over its node (New) and
// registers it on its gRPC server (Register), beside the services that
// still live in package server because they are about the node itself
// (cluster and membership, maintenance) or are its authorization (auth).
//
// Errors are domain errors (*dkverr.Error, context errors); the server's
// interceptors map them to the wire once, for every service.
package grpcapi
