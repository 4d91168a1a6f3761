// Package raftnode runs one raft member: it owns the Ready loop around a
// go.etcd.io/raft/v3 RawNode, matches applied entries to waiting proposers,
// and serves linearizable reads through batched ReadIndex rounds.
//
// The server package is its only caller. One goroutine (run) owns the
// RawNode; everything else talks to it over channels, so raft's state is
// never shared. For each Ready, in the order raft's doc.go requires:
//
//  1. an incoming snapshot is installed (after every queued apply), then
//     HardState and entries are persisted to Pebble (synced when raft says
//     MustSync) before any message of that Ready is sent — except that a
//     leader whose term and vote are already durable sends while its own
//     write runs (raft thesis 10.2.1);
//  2. messages are handed to the transport, which never blocks;
//  3. committed entries go, in order, to the apply goroutine, which applies
//     each Ready's entries into one Pebble batch with the applied index,
//     commits it, then releases the entries' waiters and wakes the loop to
//     release readers (a batch holding a conf change is applied on the
//     loop itself, after the queue drains, since only it may touch the
//     RawNode);
//  4. Advance.
//
// Before each Ready the loop takes in every message and proposal already
// waiting, so one Ready (one fsync, one apply batch) covers them all. A
// member that is the only voter campaigns as soon as it starts.
//
// Files: node.go (Node, Config, New), loop.go (the Ready loop), apply.go
// (the apply goroutine, snapshots, compaction), propose.go (proposals and
// their waiters), confchange.go (membership changes), read.go (the
// ReadIndex batcher), members.go (who may send, and the impossible
// appends and acknowledgements dropped before raft), control.go (the rest of
// the API), metrics.go (Stats), inmem.go (an in-memory network for
// tests).
//
// Testing: Config.Ticks drives raft's clock by hand, and InmemNetwork
// delivers messages only when told. TestInteraction runs the scripts in
// testdata/ on both, inside a testing/synctest bubble, so multi-member
// scenarios (lost messages, leader changes, timers) replay exactly.
//
// Invariants: an entry at or below the applied index is never applied
// again; a proposer is answered only after its entry's batch is committed;
// a ReadIndex round uses a fresh request id and its readers are released
// only once applied >= the read index.
package raftnode
