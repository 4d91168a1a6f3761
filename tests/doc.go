// Package tests holds DKV's multi-node tests: in-process clusters from
// server/servertest (start, stop, restart, partition, heal, wait for a
// leader or for replication) and process-level clusters of `dkv serve`
// built by internal/testutil.
package tests
