// Package state is DKV's replicated state machine: every committed raft
// command is applied here, deterministically, on every member.
//
// Machine implements raftnode.StateMachine[Result] (the server asserts
// it where it wires the two). It decodes the
// dkvpb.InternalRequest an entry carries and applies it through one flat
// dispatch (Machine.apply): KV put, delete, txn, counter and compaction,
// lease grant, revoke, renew, checkpoint and expiry, and lock acquire,
// release and cancel go to the MVCC engine (package mvcc, which keeps the
// keyspace, ranges and txns, and drives the lease and lock tables in the
// same batch); member attributes and NOSPACE alarms are applied here, rate-limit
// decisions in package ratelimit (outside the MVCC keyspace: no revision), and
// conf changes mirror into the member table (membership.go).
//
// Each command yields a Result: the response or the refusal, the revision,
// and typed Effects. The machine does no I/O beyond the batch; it hands
// the effects to an Executor, which the server implements, at the moment
// each must happen:
//
//   - lease changes at apply time (Executor.LeasesChanged): the time a
//     member learns of a lease change is what its lessor counts from (see
//     lease.Lessor.Promote), so it must not wait for the commit;
//   - events, lock grants and purge work once the batch is durable
//     (Executor.Committed), so no watcher, waiter or purge ever acts on
//     state that a crash could still undo.
//
// Invariants: Apply depends only on the entry and the state (never on the
// node's configuration, clock or map order), so two members applying the
// same entries hold byte-identical state; a refused command writes
// nothing; storage errors during apply panic, since a node that cannot
// apply must stop rather than diverge.
//
// Callers: the server (server/effects.go) creates the Machine and passes
// it to raftnode; the server's handlers read the alarm table (Alarms) and
// use GrowsData and NoSpaceError for the check before proposing.
package state
