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
	gauge("quota_bytes", "The --quota-bytes this member enforces (0: no quota); compare with db_size_bytes.", func() float64 {
		return float64(max(s.cfg.QuotaBytes, 0))
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
