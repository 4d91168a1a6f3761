// Package lease holds DKV's leases: their persistent records (the
// deterministic part, applied by internal/mvcc inside the same batch and
// revision as the keys they delete) and the Lessor, the in-memory table the
// leader uses to decide when a lease has expired.
//
// # Who calls it
//
// internal/mvcc reads and writes lease records through Get, Set, Attach,
// Detach, ... while applying commands, and reports what changed as
// Changes; package state returns them in its Effects, and the server
// feeds them, at apply time, to its Lessor on
// every member, calls Promote/Demote as leadership moves, and on the leader
// asks the Lessor which leases to checkpoint (Checkpoints) and expire
// (Expired), proposing those decisions through raft.
//
// # Key layout
//
//	s/ll/<id>          lease record: uvarint ttl_ms, remaining_ms, epoch; flags byte;
//	                   then, if flag 2 is set, the owner's user name
//	s/lk/<id><key>     the key is attached to lease id (empty value)
//	s/lm/seq           the last server-assigned lease id, 8 bytes big-endian
//
// <id> is 8 bytes big-endian.
//
// # Invariants
//
//   - Records change only through applied commands; nothing here reads a
//     clock. The Lessor reads its Clock, but only to decide what to
//     propose.
//   - s/lk/<id><key> exists iff key is live and its lease is id.
//   - A record's epoch grows with every grant and renewal. Checkpoints and
//     expiries carry the epoch the leader saw and apply only if it is still
//     current, so neither can undo a renewal committed before it.
//   - remaining_ms is the lease's remaining TTL as of the command that last
//     wrote it (a grant or renewal: the full TTL; a checkpoint: what the
//     leader measured). A member that applied that command at local time t
//     knows the lease cannot expire before t + remaining_ms, which is what
//     a new leader starts from (see Lessor.Promote and docs/leases.md).
//   - A record's owner is the user who granted it, fixed at grant. With
//     auth enabled, apply renews, revokes and attaches keys and locks to a
//     lease only for its owner or root (MayUse); a lease granted with auth
//     disabled has no owner and is root's alone once auth is enabled.
//   - Every duration above is measured on the Lessor's clock slowed by
//     1+maxDrift (NewLessor). For members whose clocks run within
//     ±maxDrift of real time it is never longer than the real duration,
//     so "cannot expire before" holds in real time; remaining_ms is in
//     that slowed time, which only errs towards longer leases.
package lease
