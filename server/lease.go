package server

import "time"

// Leases, server side (see docs/leases.md):
//
//   - Grant and Revoke are ordinary proposals (the Lease service is in
//     grpcapi/lease.go).
//   - A keep-alive, received by any member, is made durable before it is
//     acknowledged: the member's renewer group-commits all keep-alives
//     waiting at that moment into one LeaseRenew entry (at most one in
//     flight per member), and answers each once that entry is applied.
//     The leader answers from memory instead (auth disabled) a keep-alive
//     of a lease whose own renewal it proposed less than the renew window
//     ago; every later leader covers that window (lease.Lessor
//     SetRenewWindow, CaughtUp from leaseCatchUp).
//   - The leader's lessor tracks deadlines; leaseLoop proposes a
//     LeaseExpire per expired lease and, in batches, LeaseCheckpoints of
//     leases whose remaining TTL was last recorded LeaseCheckpointInterval
//     ago or more.

const (
	// maxExpiriesInFlight bounds concurrent LeaseExpire proposals.
	maxExpiriesInFlight = 64
	// maxCheckpointBatch bounds the leases in one LeaseCheckpoint entry.
	maxCheckpointBatch = 10000
	// leaseProposeTimeout bounds the loop's and the renewer's proposals.
	leaseProposeTimeout = 5 * time.Second
)
