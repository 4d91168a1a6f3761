// Package chaos is DKV's reliability suite: it drives workloads against a
// cluster while a nemesis injects faults on a seeded schedule, records
// every operation's call and return (with unknown outcomes), and runs
// checkers over the result: linearizability of the KV history (porcupine,
// partitioned per key and split into bounded windows), durability of
// acknowledged writes, counter bounds and replica convergence; and, in
// coord.go, lock safety (fencing), watch completeness and lease safety;
// in ratelimit.go and semaphore.go, the rate limiter's window bound and
// the semaphore's holder bound (from the holders' fenced-write logs).
//
// Who calls it: the tests in this package (`make chaos`, the short CI
// run), tests/docker_test.go, and later the lease, lock and watch suites,
// which plug in through Workload and Checker: a workload records its own
// events with Recorder.Append under a stream name, and a checker reads
// them back with Recorder.Stream.
//
// Invariants: the fault schedule is a pure function of (seed, duration,
// fault kinds), so a seed replays the same schedule; the checkers only
// ever weaken what they assume about an operation whose outcome is
// unknown (it may be linearized anywhere after its call, or never), so an
// anomaly they report is a real one.
package chaos
