// Package client is DKV's Go client.
//
// One *Client type serves two deployments with the same API:
//
//   - New connects to a remote DKV cluster over gRPC. With several
//     endpoints it balances reads across them, sends writes to the
//     leader once it knows it, and routes around members that are down
//     or hung (Config.UnresponsiveTimeout).
//   - OpenEmbedded starts a single-node store in this process (no network
//     listeners) and talks to it through an in-memory pipe.
//
// Both implement KV, the interface later features and recipes build on.
//
// # Errors
//
// Every DKV status arrives as an error matching one of the sentinels
// (ErrNotFound, ErrConflict, ...) with errors.Is; the concrete type is
// *Error, which carries the server's message. Reads are retried on
// ErrUnavailable against another endpoint until ctx ends. Writes are
// retried only when the server refused them before they could apply;
// when a write's outcome is unknown (the connection broke or ctx expired
// after the request was sent) the error matches ErrUnknownOutcome and the
// write may or may not have been applied. Check for it before treating a
// failed write as not done: re-read the key, or make the write idempotent
// with IfVersion / IfModRevision / a Txn compare.
package client
