// Package restore is the Pebble side of a backup: it builds a new
// member's data dir from a backup file (Restore) or from an etcd
// snapshot (RestoreEtcd, through package etcdsnap; both share one
// build of the data dir), and reads what a Pebble checkpoint holds
// (Inspect) so that a member can describe the backup it streams.
//
// Callers: 'dkv snapshot restore [--from-etcd]' (the server-side
// commands) and the server (Inspect; the restore meta keys and NormalizeInitialCluster,
// which its bootstrap checks a restored data dir against). It is apart
// from package backup, the file format, so that a program that only
// writes or verifies backup files links no Pebble.
//
// Invariant: Restore and RestoreEtcd never write into a data dir that exists and is not
// empty, and leaves no half-built one behind when it fails.
package restore
