// Package backup is DKV's backup file: the Pebble checkpoint a member's
// Maintenance.Snapshot streams (a tar archive), wrapped with what it holds
// (revision, key count, member, cluster) and a SHA-256 over the whole
// file, so a damaged or cut file is refused instead of restored.
//
// Callers: the CLI ('dkv snapshot save|status'), the server's scheduled
// backups, and package restore, which builds a data dir from a file. This
// package is only the file format: it talks to no network and links no
// Pebble, so that the client side of dkv can write and check backups
// without linking the storage engine.
//
// Layout of a file:
//
//	"DKVSNAP1" | data (tar, N bytes) | metadata (JSON, M bytes) |
//	N (8 bytes BE) | M (8 bytes BE) | SHA-256 of everything before | "DKVSEND1"
//
// Invariant: a file is accepted only if its footer is intact and the
// SHA-256 of its first 8+N+M bytes equals the recorded one.
package backup
