// Package storage is DKV's on-disk layout: one Pebble database per node
// holding both the raft log and the state machine. It owns the raft log,
// the HardState, the applied index and ConfState, and snapshots; what the
// state's records mean belongs to the packages that write them.
//
// Key prefixes (<id> and <index> are 8 bytes, big-endian):
//
//	r/hs                  raft HardState                          (raft side, this package)
//	r/snap                raft snapshot metadata of the last log compaction
//	r/e/<index>           raft log entries
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
// the log tail since the last compaction, repopulated from Pebble at start
// (the pattern raft's doc.go describes). The log is compacted only below an
// applied index that is durable.
//
// Damage: Open refuses (a *DamageError, errors.Is ErrDamaged) a data dir
// whose durable raft state is damaged or missing: corruption Pebble reports
// (WAL records with sync offsets after them, SST and MANIFEST checksums),
// and loss it cannot see (a WAL cut short), found by comparing the
// recovered log with the durability witness, a file beside Pebble's that
// records the raft state known durable (witness.go). Corruption Pebble
// reports while running is passed to Options.OnDamage and makes Damage
// non-nil; the node must then stop.
package storage
