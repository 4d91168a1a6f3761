// Package servercmd holds dkv's server-side commands, the etcdutl side of
// the dkv command: the ones that open a data dir or run a node. They are
// 'dkv serve', 'dkv dev-cluster' (with --secure's local CA and auth
// bootstrap) and 'dkv snapshot restore'.
//
// Callers: cmd/dkv, which passes Server to cli.Main. Package cli holds
// the root command, the shared plumbing (flags, output, exit codes) and
// every client command; it must not import this package, so that the
// client side links no server, Pebble or raft. This package imports cli
// for that plumbing and adds its commands through Server.AddCommands.
//
// Invariant: every flag, output line and exit code here is the contract
// docs/cli.md describes, the same as when these commands lived in cli.
package servercmd
