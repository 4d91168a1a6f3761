// Package state is DKV's replicated state machine: every committed raft
// command is applied here, deterministically, on every member.
//
// Machine implements raftnode.StateMachine[Result] (the server asserts
// it where it wires the two; this package imports no raftnode). It
// decodes the dkvpb.InternalRequest an entry carries and applies it
// through the command registry (command.go): one Command row per field of
// the request's oneof, declared beside its logic (kv.go, lease.go,
// lock.go, queue.go, ratelimit.go, auth.go, members.go, alarms.go,
// stores.go), saying how the command is validated, what a client needs to
// make it, whether the NOSPACE alarm refuses it, and how it applies.
// Lookup is the one switch over command kinds. Commands on the keyspace
// (KV, leases, locks, the queue, label indexes) apply through the MVCC
// engine (package mvcc, which keeps the keyspace, ranges and txns, and
// drives the lease and lock tables in the same batch); member attributes,
// alarms, auth changes and named stores here; rate-limit decisions in
// package ratelimit (outside the MVCC keyspace: no revision); conf
// changes mirror into the member table (members.go).
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
// it to raftnode; the server's propose path asks the registry (Lookup,
// Command.Validate, Command.GrowsData) before proposing, its auth
// interceptor asks it what a request needs (CommandFor, Command.Needs),
// and its handlers read the alarm table (Alarms).
package state
