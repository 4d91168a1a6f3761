// Package storage is DKV's on-disk layout: one Pebble database per node
// holding both the raft log and the state machine.
//
// Key prefixes:
//
//	r/hs          raft HardState                       (raft side)
//	r/snap        metadata of the last log compaction  (raft side)
//	r/e/<index>   raft log entries, big-endian index   (raft side)
//	r/meta/...    node identity (member id, cluster id)
//	s/raft/...    applied index, ConfState, members    (state side)
//	s/m...        MVCC keyspace (internal/mvcc)
//	s/l..., s/k.. leases, locks
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
