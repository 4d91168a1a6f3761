package raftnode

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats are counters exported as metrics.
type Stats struct {
	Proposals     atomic.Uint64
	ProposalsDrop atomic.Uint64
	// ProposalsUnknown counts proposals answered "outcome unknown" because
	// the leader changed while they were pending and they were not applied.
	ProposalsUnknown atomic.Uint64
	ReadRounds       atomic.Uint64
	AppliedBatch     atomic.Uint64
	PendingProps     atomic.Int64
	LeaderChanges    atomic.Uint64
	Readies          atomic.Uint64
	// LogDivergence counts appends from the leader that showed this
	// member's committed log differs from the leader's (see checkAppend).
	LogDivergence atomic.Uint64

	// Where a write's time goes: the synced raft log write of a Ready,
	// the apply of a committed batch (one Pebble commit), and a
	// proposal from hand-off to raft to its applied result.
	PersistSeconds  prometheus.Histogram
	ApplySeconds    prometheus.Histogram
	ProposalSeconds prometheus.Histogram
}

func newStats() Stats {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "dkv", Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18),
		})
	}
	return Stats{
		PersistSeconds:  h("raft_persist_seconds", "Synced raft log writes (entries and HardState of one Ready), fsync included."),
		ApplySeconds:    h("apply_seconds", "Applying one batch of committed entries, Pebble commit included."),
		ProposalSeconds: h("proposal_seconds", "Proposals made on this member, from hand-off to raft to the applied result."),
	}
}
