// Package cli implements the dkv command: the server (dkv serve) and a
// client for every KV operation. cmd/dkv only calls Main. One file per
// command; errors map to documented exit codes (exitcode.go), so shell
// scripts can branch on outcomes without parsing messages.
package cli
