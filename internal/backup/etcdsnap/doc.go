// Package etcdsnap converts between DKV's replicated state and etcd's
// snapshot file, so that a user can move from etcd to DKV and back: a
// bbolt database in etcd's v3 storage schema, as etcd's
// Maintenance.Snapshot streams it and `etcdctl snapshot save` stores it
// (the database followed by the SHA-256 of its bytes).
//
// Callers: the server's etcd API (Maintenance.Snapshot writes the state
// with Write and streams the file, then its SHA-256), and package
// restore ('dkv snapshot restore --from-etcd' reads a file with Import
// into a new data dir, which restore then finishes as it finishes a
// restored DKV backup).
//
// The schema (etcd's published one, go.etcd.io/etcd/server/v3/storage/
// schema; no etcd code is used, only its generated messages):
//
//	key      <main rev, 8 bytes BE>'_'<sub rev, 8 bytes BE>['t' for a delete]
//	         -> mvccpb.KeyValue (a delete's holds only the key)
//	meta     consistent_index, term (8 bytes BE); scheduledCompactRev,
//	         finishedCompactRev (a revision, 17 bytes as above)
//	lease    <id, 8 bytes BE> -> leasepb.Lease (ID, TTL, RemainingTTL in s)
//	cluster  clusterVersion -> "3.5.0"
//	auth     authEnabled -> 0 or 1; authUsers, authRoles; alarm,
//	         members, members_removed
//
// What moves: every version a read or watch can reach (the live keys at
// the compact revision, every put and delete after it), with revision,
// create revision, version and lease, the compact revision, and the
// leases. What does not: users and roles (either way), named stores'
// keys (the file is the default store's, what an etcd client sees),
// DKV's lock table, labels and other DKV-only state (to etcd), and the
// membership (a restore makes a new cluster either way). Import refuses
// a key in the named stores' key space.
//
// Invariants: Import never accepts a file whose recorded SHA-256 does
// not match its contents, or that is not a bbolt database with etcd's
// key bucket, and reports which; versions reach the store in revision
// order, as mvcc.Loader requires.
package etcdsnap
