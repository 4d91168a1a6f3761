// Package storage is DKV's on-disk layout: the raft log and HardState in
// segment files under raftlog/ (raftlog.go), and one Pebble database per
// node holding the state machine. It owns the raft log, the HardState, the
// applied index and ConfState, and snapshots; what the state's records
// mean belongs to the packages that write them. The data dir records its
// storage format (format.go); format 1 kept the raft log in Pebble (r/hs,
// r/e/<index>) and is migrated at open.
//
// Key prefixes (<id> and <index> are 8 bytes, big-endian):
//
//	r/snap                raft snapshot metadata of the last log compaction (raft side, this package)
//	r/meta/<name>         node identity, not replicated: member_id,
//	                      cluster_id; r/meta/installing while a snapshot
//	                      is being installed
//	s/raft/applied        applied index                           (state side)
//	s/raft/confstate      raft ConfState as of the applied index
//	s/raft/members/<id>   member table   (records: internal/state)
//	s/alarm/<id>[<kind>]  alarms         (records: internal/state)
//	s/mk/ s/mh/ s/mr/ s/mm/  MVCC keyspace: latest, history, changes
//	                      by revision, revision and compaction marks
//	                      (internal/mvcc/keys.go)
//	s/ll/ s/lk/ s/lm/     leases: records, attached keys, id sequence
//	                      (internal/lease/store.go)
//	s/kh/ s/kt/ s/kq/ s/ko/ s/kl/ s/km/  locks (internal/lock/doc.go)
//
// Beside Pebble's files the data dir holds the durability witness
// (witness.go), the ballast (space.go) and snap/, where an incoming
// snapshot is staged; all go through Options.FS.
//
// Everything under "s" is the replicated state machine: a snapshot sent to
// a follower is exactly that prefix. The applied index lives under "s" and
// is written in the same batch as the state it covers, so a restart resumes
// from the last applied entry and never applies an entry twice.
//
// The raft.Storage the raft library reads is a raft.MemoryStorage holding
// the log tail since the last compaction, repopulated from the raft log at
// start (the pattern raft's doc.go describes). State batches are written
// without a sync: the raft log is the durability of record, and its
// segments are deleted only below an applied index that a synced Pebble
// write made durable (CompactLog).
//
// Damage: Open refuses (a *DamageError, errors.Is ErrDamaged) a data dir
// whose durable raft state is damaged or missing: corruption of a raft log
// segment or of Pebble's files (records with sync offsets after them, SST
// and MANIFEST checksums), a hole in the raft log, and loss neither can
// see (a log cut short), found by comparing the
// recovered log with the durability witness, a file beside Pebble's that
// records the raft state known durable (witness.go). Corruption Pebble
// reports while running is passed to Options.OnDamage and makes Damage
// non-nil; the node must then stop.
package storage
