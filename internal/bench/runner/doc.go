// Package runner is the system-agnostic half of DKV's load generator: it
// drives N client goroutines calling a Worker's Op for a duration or a
// total op count (optionally rate limited, with a progress line), times
// every op into a log-linear histogram and counts failures by a status
// name. It imports nothing of DKV's API on purpose: bench/compare links it
// next to etcd's client to measure etcd with the very same loop and
// histogram that `dkv bench` (package bench) uses for DKV.
//
// Invariant: with Total = N and an uncanceled context, exactly N ops are
// attempted and Result.Ops = Result.OK + the sum of Result.Errors = N.
package runner
