// Package mvcc is DKV's deterministic, multi-version key-value engine: it
// applies committed KV, lease and lock commands (put, delete range, txn,
// counter, compact; driving packages lease and lock in the same batch)
// and serves reads at the current or a past revision. It knows no recipe:
// commands built on the keyspace elsewhere (package state's job queue)
// use its exported primitives (primitives.go) and learn of its writes
// through a WriteObserver.
//
// # Who calls it
//
// Package state, the state machine, dispatches each committed command to
// one method of a Writer (Store.Begin, then Put, Txn, LeaseGrant, ...,
// then Finish), into the indexed Pebble batch raftnode created with
// NewIndexedBatch; several entries may be applied into one batch before
// it is committed together with the applied index. Finish returns the
// revision and the command's Changes (events, lease changes, lock
// grants). Package state's command registry names the validator
// (ValidatePut, ValidateTxn, ...) the server calls for each command
// before proposing; the server calls Range for reads
// (on a snapshot, the DB or a batch), HashKV for consistency checks and
// PurgeHistory in the background after a compaction. The watch hub
// consumes the events and, for catch-up, the change log.
//
// Package etcdsnap moves whole keyspaces in and out of etcd's snapshot
// file offline (transfer.go): Export reads every version a read or watch
// can reach, in revision order, and a Loader writes such versions into
// an empty store with the records, change log, counters and lease
// attachments the commands would have written.
//
// The package knows nothing of raft, gRPC or files: it reads through
// pebble.Reader and writes into a *pebble.Batch.
//
// # Key layout
//
// Every key starts with "s/m" (declared in package keys); other prefixes
// belong to other packages.
//
//	s/mk/<key>                      latest record of a live key:
//	                                uvarint create, mod, version; varint lease; value
//	s/mh/<esc(key)>\x00\x01<^rev>   one history record per (key, revision):
//	                                kind (1 put, 2 tombstone); for a put
//	                                uvarint create, version; varint lease; value
//	s/mr/<rev>                      change log: the keys written at rev, in order
//	                                (uvarint n; n × kind, uvarint len, key); see DecodeChanges
//	s/mm/rev                        current revision, 8 bytes big-endian (absent: 1)
//	s/mm/compact                    compact revision, 8 bytes big-endian
//	s/mx/<id>                       a label index's definition (index.go)
//	s/mi/<id><value>\x00\x01<esc(key)>\x00\x01<^rev>
//	                                a label index entry: from rev on, key has
//	                                (1) or no longer has (2) label = value
//	s/mm/idxseq                     last allocated index id
//
// A record with labels (labels.go) is marked: an s/mk value starting
// with 0x00 (a create revision never encodes so), an s/mh kind 3; either
// then holds uvarint len, the labels, and the plain record. Unlabelled
// records are encoded as before labels existed.
//
// Lease records live under s/l (package lease) and the lock table under
// s/k (package lock); both are written here, in the same batch as the keys
// they govern. Lock commands (lock.go) change no key and so no revision;
// every write is checked against the lock table before anything is
// written (a locked key needs its current handle; a handle on another key
// is a fence), so a refused write still writes nothing.
//
// esc maps 0x00 to 0x00 0xFF, so "\x00\x01" ends the key unambiguously and
// history keys sort by user key; the revision is big-endian and bitwise
// inverted, so a key's newest version comes first and SeekGE(key, R)
// finds the newest version at or below R. <rev> in s/mr is big-endian.
//
// # Invariants
//
//   - Determinism: the writes a Writer makes depend only on the command and
//     the state read through the batch: no clock, randomness, map order or
//     node configuration (size limits are enforced before proposing, not at
//     apply, so nodes with different flags cannot diverge). Replicas fed
//     the same commands hold byte-identical s/m keyspaces.
//   - An empty store has revision 1, as etcd's (FirstRevision: s/mm/rev
//     is absent until the first write, and an absent one reads as 1); the
//     first write is revision 2. Each
//     command that changes at least one key advances the revision by
//     exactly one, and all its writes share it. Refused commands, failed
//     conditions, deletes that delete nothing and read-only txns write
//     nothing.
//   - A refused command writes nothing: txn conditions are all checked
//     before the first write (ValidateTxn forbids a branch to write a key
//     twice, which makes that check exact).
//   - s/mk/<k> exists iff k is live, and equals k's newest history record.
//   - Every put and delete writes a history record, so reads at any
//     revision in [compact, current] are exact. PurgeHistory removes only
//     records no such read can reach.
//   - Revision and CompactRevision are atomics updated by the Writer; Range and
//     HashKV take their revisions from the reader's view of s/mm, never
//     from memory.
//   - The Store's set of locked keys equals the keys with a holder in the
//     lock table as the batch being applied sees it (grants add, releases
//     remove, Open and Reload rebuild it from the table), so a write to a
//     key outside it skips the lock-table lookup and decides exactly as
//     the lookup would. It is a set, not a count, so the same commands
//     applied again from the same state leave it the same.
//   - Likewise the Store's copy of the lease records (by id) equals the
//     lease table: every record write and delete goes through the Writer's
//     setLease and deleteLease, and Open and Reload rebuild the copy, so
//     a renewal, checkpoint, expiry or put with a lease decides from the
//     same record a Pebble read would return.
package mvcc
