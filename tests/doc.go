// Package tests holds DKV's multi-node tests and the in-process cluster
// harness they share (Cluster): start, stop, restart, partition, heal,
// wait for a leader, wait for replication. Nodes are real servers on
// loopback ports, so the real gRPC peer transport is exercised; faults are
// injected through transport.Faults.
package tests
