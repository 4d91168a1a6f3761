// Package testutil holds the helpers every test package shares: waiting
// for a condition (Eventually), a free loopback address (FreeAddr), the
// dkv binary built once per test binary (DKVBinary; any other main
// package of the module with Binary), a child process with
// its output in a log file (Process), a cluster of `dkv serve` processes
// (NewCluster, whose Members a test stops and starts again) and a logger
// that drops everything (Quiet).
//
// It imports only the standard library, so any package of the main
// module and the test-only modules beside it (compat/etcd, tests/browser)
// can use it without linking DKV. Starting a node in process is
// server/servertest's.
package testutil
