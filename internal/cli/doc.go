// Package cli implements the dkv command's client half, like etcdctl:
// the root command, the plumbing every command shares (global flags,
// endpoints, client TLS flags, text and JSON output, exit codes) and a
// client for every operation, one file per command. Errors map to
// documented exit codes (exitcode.go), so shell scripts can branch on
// outcomes without parsing messages.
//
// The server-side commands, the ones that run a node or open a data dir
// (serve, dev-cluster, snapshot restore), are package servercmd, like
// etcdutl. cmd/dkv passes them to Main as a Server; this package never
// imports them.
//
// Invariant: this package links no server, Pebble or raft
// (TestLayering in docs/architecture_test.go), so a client command cannot reach into a node's
// internals, and what it shares with servercmd is exported here (App,
// Usagef, Args, WriteJSON, ClientTLS).
package cli
