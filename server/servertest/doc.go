// Package servertest starts DKV nodes inside a test: one node (Start),
// reached through an in-memory connection, or an n-node cluster
// (NewCluster) on loopback ports with partitions, restarts and waits for
// a leader or for replication. Every package and module that runs a
// server in process uses it; the polling, free-address and built-binary
// helpers are internal/testutil's.
//
// It knows the server only through its exported API (server.New,
// StartInProcess, Stop), so a test here sees what an embedding program
// sees.
package servertest
