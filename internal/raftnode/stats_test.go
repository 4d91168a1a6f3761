package raftnode

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func sampleCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// The batching and raft-loop histograms are fed by a member's own work.
func TestLoopHistogramsRecord(t *testing.T) {
	n, _, stop := startNode(t, t.TempDir(), 0)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 10 {
		if _, err := propose(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	s := n.Stats()
	for name, h := range map[string]prometheus.Histogram{
		"SyncEntries": s.SyncEntries, "ApplyEntries": s.ApplyEntries,
		"StepSeconds": s.StepSeconds, "HandoffSeconds": s.HandoffSeconds,
	} {
		if sampleCount(t, h) == 0 {
			t.Errorf("%s recorded nothing after 10 proposals", name)
		}
	}
	if got := len(s.LoopCollectors()); got != 5 {
		t.Errorf("LoopCollectors: %d collectors, want 5", got)
	}
}

// BenchmarkPropose measures a single member's proposal path end to end
// (Pebble without fsync), with 16 proposers.
func BenchmarkPropose(b *testing.B) {
	n, _, stop := startNode(b, b.TempDir(), 0)
	defer stop()
	ctx := context.Background()
	if _, err := propose(ctx, n); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/16 + 1
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				if _, err := propose(ctx, n); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
