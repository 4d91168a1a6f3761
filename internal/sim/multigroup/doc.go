// Package multigroup is a deterministic simulation of the design in
// docs/design/multi-group.md: named stores placed on separate raft
// groups, a meta group holding the placement table, clients that route by
// a cached placement, and a mover that moves a store from one group to
// another while members crash, messages are delayed or dropped and the
// network partitions.
//
// It is a model of the protocol, not production code: nothing outside
// this package imports it, and it imports nothing of DKV's. A raft group
// is modelled as one committed log with a leader that commits only while
// it reaches a majority of its members; what raft itself guarantees
// (log matching, leader completeness) is assumed, and what the move adds
// on top of it (the fence, the target's catch-up, the adopt, the
// placement epoch, the revision floor) is what the simulation exercises.
//
// Everything is driven by one seeded PRNG and one event queue ordered by
// (simulated time, sequence number), so a seed replays exactly. Run
// returns the first violated invariant as an error that names the seed:
//
//   - each (store, key)'s history of gets, puts, lock acquires, fenced
//     puts, releases, lease renewals and lease expiries is linearizable
//     (porcupine), which covers "no acknowledged write is lost", "a lock
//     handle is neither silently dropped nor outlived by a newer holder
//     across a move" and "fencing tokens only grow";
//   - no lease expires before its holder's last acknowledged renewal
//     said it would hold (a renewal called at C holds until C+TTL);
//   - a watcher that follows a store across moves sees its revisions
//     only grow, and what it saw is, event for event, a prefix of the
//     store's final change log;
//   - at no moment do two groups serve the same store.
//
// Config.Bugs holds deliberate protocol bugs; the tests turn each on and
// assert the checker catches it, so the checker is shown able to fail.
//
// Running it:
//
//	go test ./internal/sim/multigroup                   # 20 seeds per variant, and the bugs
//	go test ./internal/sim/multigroup -seeds 1000       # more seeds
//	go test ./internal/sim/multigroup -run TestCatchesAdoptBeforeCaughtUp -seed 9 -v
//	go test ./internal/sim/multigroup -run TestProjection -v   # the cost model's table
//
// Cost projects write throughput by member and group count from a
// per-put CPU cost (docs/design/multi-group.md, "The numbers");
// BenchmarkIdleGroupMemory measures go.etcd.io/raft's heap per idle
// group.
package multigroup
