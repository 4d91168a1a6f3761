// Package raftnode runs one raft member: it owns the Ready loop around a
// go.etcd.io/raft/v3 RawNode, matches applied entries to waiting proposers,
// and serves linearizable reads through batched ReadIndex rounds.
//
// The server package is its only caller. One goroutine (run) owns the
// RawNode; everything else talks to it over channels, so raft's state is
// never shared. For each Ready, in the order raft's doc.go requires:
//
//  1. HardState and entries are persisted to Pebble (synced when raft says
//     MustSync) before any message of that Ready is sent;
//  2. messages are handed to the transport, which never blocks;
//  3. an incoming snapshot is installed, then committed entries are applied
//     into one Pebble batch together with the applied index, and committed;
//  4. waiters of the applied entries and of read indexes are released;
//  5. Advance.
//
// Invariants: an entry at or below the applied index is never applied
// again; a proposer is answered only after its entry's batch is committed;
// a ReadIndex round uses a fresh request id and its readers are released
// only once applied >= the read index.
package raftnode
