package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// registerOpsMetrics adds what the dashboard and alert rules in deploy/
// need beyond the raft and request metrics (docs/operations.md#metrics):
// the quota next to db_size_bytes, how far watch fan-out trails the
// store, and which version this member runs.
func registerOpsMetrics(s *Server, reg *prometheus.Registry) {
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "dkv", Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "dkv", Name: name, Help: help}, f))
	}
	gauge("quota_bytes", "The --quota-bytes this member enforces (0: no quota); compare with db_size_in_use_bytes.", func() float64 {
		return float64(max(s.cfg.QuotaBytes, 0))
	})
	// The storage engine's block cache (--cache-bytes): a key space that
	// outgrows it shows as misses rising against hits.
	gauge("block_cache_capacity_bytes", "The storage engine's block cache size (--cache-bytes).", func() float64 {
		return float64(s.store.BlockCache().CapacityBytes)
	})
	gauge("block_cache_size_bytes", "What the storage engine's block cache holds now.", func() float64 {
		return float64(s.store.BlockCache().SizeBytes)
	})
	counter("block_cache_hits_total", "Block reads the storage engine's block cache served.", func() float64 {
		return float64(s.store.BlockCache().Hits)
	})
	counter("block_cache_misses_total", "Block reads that missed the storage engine's block cache and went to the table files (the OS page cache or the disk).", func() float64 {
		return float64(s.store.BlockCache().Misses)
	})
	gauge("watch_fanout_lag_revisions", "Revisions applied to the store but not yet fanned out to watchers on this member.", func() float64 {
		if s.watchHub == nil {
			return 0
		}
		return float64(max(s.kv.Revision()-s.watchHub.Rev(), 0))
	})
	gauge("watchers", "Watches open on this member.", func() float64 {
		if s.watchHub == nil {
			return 0
		}
		return float64(s.watchHub.Stats().Watchers)
	})
	counter("watch_catchups_total", "Catch-up reads for watchers that fell behind the fan-out (or started at a past revision).", func() float64 {
		if s.watchHub == nil {
			return 0
		}
		return float64(s.watchHub.Stats().CatchUps)
	})
	counter("watch_compacted_cancels_total", "Watches cancelled because they fell behind compaction (their client must restart from a newer revision).", func() float64 {
		if s.watchHub == nil {
			return 0
		}
		return float64(s.watchHub.Stats().CompactCancels)
	})
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "dkv", Name: "build_info",
		Help:        "Always 1; the version label is the dkv server version this member runs (and publishes in the member table).",
		ConstLabels: prometheus.Labels{"version": Version},
	})
	info.Set(1)
	reg.MustRegister(info)
}
