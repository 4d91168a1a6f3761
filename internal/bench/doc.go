// Package bench is DKV's load generator: the engine behind `dkv bench` and
// the DKV side of the etcd comparison in bench/compare.
//
// It has two layers:
//
//   - internal/bench/runner, system-agnostic: it drives N client
//     goroutines, each calling one Worker's Op in a loop, for a duration or
//     a total op count, optionally rate limited, with a progress line once a
//     second; it times every op into a per-client log-linear histogram and
//     counts failures by a status name a classifier gives. bench/compare
//     reuses it unchanged for etcd, so both systems are measured by the same
//     loop and the same histogram. It must not import dkvpb: DKV's and
//     etcd's generated code both register a proto file named "kv.proto",
//     and protobuf panics at init when both are linked into one binary.
//   - This package: DKV workloads (put, get, mixed, txn, counter) over the
//     generated gRPC clients (dkvpb), selected by name from a registry, and
//     Bench, which dials, sets up, runs and reports one of them.
//
// Extension point: a new workload (lease-keepalive, lock, watch, ...) is a
// Workload implementation registered with Register in its own file. Setup
// prepares the store before the clock starts; NewWorker returns the op loop
// body for one client. Workloads whose unit is not one request/response
// (watch: events delivered, put→event latency) keep their own
// runner.Histogram and implement Finisher to put their metrics in
// Result.Extra; a Worker implementing io.Closer is closed after the run
// (e.g. to end its watch stream or revoke its lease).
//
// Invariants the tests check: with Options.Total = N, exactly N ops are
// attempted (ops = OK + sum of errors), and for write workloads every OK op
// is exactly one applied write.
package bench
