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
	// ProposalsResent counts idempotent proposals proposed again to a
	// new leader (ProposeIdempotent).
	ProposalsResent atomic.Uint64
	ReadRounds      atomic.Uint64
	AppliedBatch    atomic.Uint64
	PendingProps    atomic.Int64
	LeaderChanges   atomic.Uint64
	Readies         atomic.Uint64
	// LogDivergence counts messages dropped because they showed a log
	// that differs from this member's: appends from the leader showing
	// this member's committed log differs from the leader's (see
	// checkAppend), and, on the leader, acknowledgements of entries it
	// does not have (see checkAck).
	LogDivergence atomic.Uint64

	// Where a write's time goes: the synced raft log write of a Ready,
	// the apply of a committed batch (one Pebble commit), and a
	// proposal from hand-off to raft to its applied result.
	PersistSeconds  prometheus.Histogram
	ApplySeconds    prometheus.Histogram
	ProposalSeconds prometheus.Histogram

	// Batching: entries per synced raft log write (a Ready that must
	// sync), and entries per applied batch.
	SyncEntries  prometheus.Histogram
	ApplyEntries prometheus.Histogram
	// Where the raft loop's own time goes, besides PersistSeconds:
	// stepping what woke it and everything else already waiting into
	// raft (once per wake-up), handing a Ready's messages to the
	// transport, and handing its committed entries to the apply goroutine
	// (waiting when it is behind, or applying a batch that holds a conf
	// change on the loop).
	StepSeconds    prometheus.Histogram
	SendSeconds    prometheus.Histogram
	HandoffSeconds prometheus.Histogram
}

// LoopCollectors are the batching and raft-loop histograms (SyncEntries
// onwards), for a registry.
func (s *Stats) LoopCollectors() []prometheus.Collector {
	return []prometheus.Collector{s.SyncEntries, s.ApplyEntries, s.StepSeconds, s.SendSeconds, s.HandoffSeconds}
}

func newStats() Stats {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "dkv", Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18),
		})
	}
	count := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "dkv", Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		})
	}
	return Stats{
		PersistSeconds:  h("raft_persist_seconds", "Synced raft log writes (entries and HardState of one Ready), fsync included."),
		ApplySeconds:    h("apply_seconds", "Applying one batch of committed entries, Pebble commit included."),
		ProposalSeconds: h("proposal_seconds", "Proposals made on this member, from hand-off to raft to the applied result."),
		SyncEntries:     count("raft_sync_entries", "Entries per synced raft log write."),
		ApplyEntries:    count("apply_batch_entries", "Committed entries per applied batch."),
		StepSeconds:     h("raft_loop_step_seconds", "Raft loop: stepping messages and proposals into raft, per wake-up."),
		SendSeconds:     h("raft_loop_send_seconds", "Raft loop: handing one Ready's messages to the transport."),
		HandoffSeconds:  h("raft_loop_apply_handoff_seconds", "Raft loop: handing one Ready's committed entries to the apply goroutine (or applying a conf change batch itself)."),
	}
}
