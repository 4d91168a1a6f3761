// Package keys is the one registry of DKV's Pebble key layout: every
// prefix and fixed key any package writes is declared here, so a reader
// sees the whole keyspace in one file (after CockroachDB's pkg/keys).
//
// The bytes are the on-disk format: changing one breaks every existing
// data directory and every snapshot. Add, never edit.
//
// Two spaces:
//
//	r/...  raft log and node-local metadata, never replicated
//	s/...  the replicated state machine, [StateStart, StateEnd); a raft
//	       snapshot is exactly this span
//
// Callers must not modify the returned slices.
package keys

// Raft log and node-local metadata (package storage).
var (
	// RaftHardState is the raft HardState.
	RaftHardState = []byte("r/hs")
	// RaftSnapMeta is the metadata of the last snapshot (index, term,
	// ConfState).
	RaftSnapMeta = []byte("r/snap")
	// RaftEntryPrefix: r/e/<index> -> raft entry.
	RaftEntryPrefix = []byte("r/e/")
	// LocalMetaPrefix: r/meta/<name> -> node-local metadata.
	LocalMetaPrefix = []byte("r/meta/")
	// SnapshotInstalling marks a snapshot install in progress (set, synced,
	// before the state is replaced; cleared after).
	SnapshotInstalling = []byte("r/meta/installing")
)

// The replicated state: every key in [StateStart, StateEnd).
var (
	StateStart = []byte("s")
	StateEnd   = []byte("t")
)

// Raft bookkeeping inside the replicated state (package storage), so that
// the applied index moves atomically with what was applied.
var (
	// AppliedIndex is the index of the last applied entry.
	AppliedIndex = []byte("s/raft/applied")
	// ConfState is the applied raft configuration.
	ConfState = []byte("s/raft/confstate")
	// MemberPrefix: s/raft/members/<id, 8 bytes BE> -> dkvpb.Member.
	MemberPrefix = []byte("s/raft/members/")
	// MemberEnd bounds MemberPrefix.
	MemberEnd = []byte("s/raft/members0")
)

// Alarms (records and apply: package state).
var (
	// AlarmPrefix: s/alarm/<member id, 8 bytes BE> -> reason (NOSPACE);
	// s/alarm/<member id, 8 bytes BE><kind, 1 byte> -> reason for the
	// other kinds (2: CORRUPT, dkvpb.AlarmType).
	AlarmPrefix = []byte("s/alarm/")
	// AlarmEnd bounds AlarmPrefix.
	AlarmEnd = []byte("s/alarm0")
)

// Authentication and authorization (applied by package state).
var (
	// AuthState is the whole auth state, one dkvpb.AuthState.
	AuthState = []byte("s/auth/state")
)

// Client sessions for exactly-once writes (package state, session.go).
var (
	// SessionPrefix: s/cs/<id, 8 bytes BE> -> dkvpb.SessionRecord.
	SessionPrefix = []byte("s/cs/")
	// SessionEnd bounds SessionPrefix.
	SessionEnd = []byte("s/cs0")
	// SessionReplyPrefix: s/cr/<id, 8 bytes BE><seq, 8 bytes BE> -> the
	// reply (state.encodeReply) to the session's request with that sequence.
	SessionReplyPrefix = []byte("s/cr/")
)

// The MVCC keyspace (package mvcc): everything under "s/m".
var (
	// MVCCLatestPrefix: s/mk/<key> -> latest record of a live key.
	MVCCLatestPrefix = []byte("s/mk/")
	// MVCCHistoryPrefix: s/mh/<esc(key)>\x00\x01<^rev> -> history record.
	MVCCHistoryPrefix = []byte("s/mh/")
	// MVCCChangesPrefix: s/mr/<rev> -> keys changed at rev.
	MVCCChangesPrefix = []byte("s/mr/")
	// MVCCRevision is the store revision.
	MVCCRevision = []byte("s/mm/rev")
	// MVCCCompact is the compact revision.
	MVCCCompact = []byte("s/mm/compact")
	// MVCCLayout is the layout of the MVCC keyspace (mvcc.Layout), 8
	// bytes BE; absent: layout 2, with the latest records under s/mk.
	MVCCLayout = []byte("s/mm/layout")
)

// Label indexes (package mvcc), inside the MVCC keyspace so
// they move in the same batch as the keys they index.
var (
	// MVCCIndexDefPrefix: s/mx/<index id, 8 bytes BE> -> index definition
	// (uvarint created revision, uvarint len(prefix), prefix, label name).
	MVCCIndexDefPrefix = []byte("s/mx/")
	// MVCCIndexEntryPrefix: s/mi/<index id, 8 bytes BE><label value>
	// \x00\x01<esc(key)>\x00\x01<^rev> -> 1 (the key has the value from
	// rev on) or 2 (it no longer has it from rev on).
	MVCCIndexEntryPrefix = []byte("s/mi/")
	// MVCCIndexSeq is the last allocated index id.
	MVCCIndexSeq = []byte("s/mm/idxseq")
)

// Leases (package lease): everything under "s/l".
var (
	// LeaseRecordPrefix: s/ll/<id, 8 bytes BE> -> lease record.
	LeaseRecordPrefix = []byte("s/ll/")
	// LeaseKeysPrefix: s/lk/<id, 8 bytes BE><key> -> the keys attached to a
	// lease.
	LeaseKeysPrefix = []byte("s/lk/")
	// LeaseSeq is the last allocated lease id.
	LeaseSeq = []byte("s/lm/seq")
)

// Locks (package lock): everything under "s/k".
var (
	// Lock keys are <prefix><uvarint len(key)><key>[suffix].

	// LockHolderPrefix: s/kh/<key> -> current holder.
	LockHolderPrefix = []byte("s/kh/")
	// LockTokenPrefix: s/kt/<key> -> last fencing token.
	LockTokenPrefix = []byte("s/kt/")
	// LockQueuePrefix: s/kq/<key><seq, 8 bytes BE> -> waiter, in FIFO
	// order.
	LockQueuePrefix = []byte("s/kq/")
	// LockOwnerPrefix: s/ko/<key><owner> -> the waiter's queue entry.
	LockOwnerPrefix = []byte("s/ko/")
	// LockLeasePrefix: s/kl/<lease, 8 bytes BE><key> -> how many of the
	// key's locks and waits the lease holds.
	LockLeasePrefix = []byte("s/kl/")
	// LockGrantPrefix: s/kg/<key> -> when the current holder was granted
	// the lock: the store revision at the grant and the raft entry's time
	// (uvarints; the time is 0 when the entry carried none). Kept apart
	// from the holder record so that record's format is unchanged.
	LockGrantPrefix = []byte("s/kg/")
	// LockSeq is the last allocated queue sequence number.
	LockSeq = []byte("s/km/seq")
)

// The rate limiter (package ratelimit): everything under "s/b" (buckets).
var (
	// RateLimitPrefix: s/bt/<key> -> the bucket's GCRA state (TAT and
	// last decision time, 8 bytes BE each).
	RateLimitPrefix = []byte("s/bt/")
)

// Named stores (applied by package state).
var (
	// StorePrefix: s/store/<name> -> dkvpb.StoreInfo, the store's quota
	// and usage, updated in the batch of every write to the store.
	StorePrefix = []byte("s/store/")
	// StoreEnd bounds StorePrefix.
	StoreEnd = []byte("s/store0")
)
