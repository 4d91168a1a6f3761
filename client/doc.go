// Package client is DKV's Go client.
//
// One *Client type serves two deployments with the same API:
//
//   - New connects to a remote DKV cluster over gRPC. With several
//     endpoints it balances reads across them, sends writes (and the
//     lease keep-alive stream) to the leader once it knows it, and routes
//     around members that are down or hung (Config.UnresponsiveTimeout).
//   - Package server/embed starts a single-node store in this process
//     (no network listeners) and returns a *Client that talks to it
//     through an in-memory pipe. This package does not link the server:
//     a program that only talks to a remote cluster stays free of Pebble
//     and raft. NewFromConn builds a Client on any gRPC connection.
//
// The API is also a set of interfaces, one per area: KV, Watcher, Lease,
// Locker and Cluster. *Client satisfies each; recipes (package
// client/concurrency) and helpers (PutJSON, GetJSON) take interfaces, so
// they work with wrappers (a key namespace) and test doubles too.
//
// # Errors and retries
//
// Every DKV status arrives as an error matching one of the sentinels
// (ErrNotFound, ErrConflict, ...) with errors.Is; the concrete type is
// *Error, which carries the server's message.
//
// A failed call is retried up to Config.MaxRetries times (default 8),
// waiting Config.RetryBackoff (default 25ms) before the first retry and
// twice as long before each next one, up to 1s, and never past ctx; the
// balancer picks the endpoint of each attempt afresh, so a retry usually
// goes to another member when one is down. A read is retried on any
// unavailability (ErrUnavailable, a broken connection, an endpoint that
// stopped answering). A write is retried only when it certainly did not
// apply: the server refused it with ErrUnavailable, or it never left this
// process. When a write's outcome is unknown (the connection broke or ctx
// expired after the request was sent) the error matches ErrUnknownOutcome
// and the write may or may not have been applied. Check for it before
// treating a failed write as not done: re-read the key, or make the write
// idempotent with IfVersion / IfModRevision / a Txn compare. Other errors
// are returned at once.
//
// Streams reconnect with the same backoff: a watch, once established,
// resumes after its last delivered revision on every failure but a
// definite refusal, until its ctx ends (so it neither skips nor repeats
// events); the keep-alive stream reconnects for as long as it has leases
// to keep alive, each of which reports ErrLeaseExpired if its TTL runs out
// meanwhile.
package client
