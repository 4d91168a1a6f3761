package server

import (
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func newObserveMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests_total"}, []string{"method", "code"}),
		latency:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "request_duration_seconds"}, []string{"method"}),
	}
}

// BenchmarkObserve is the per-request metrics cost of every gRPC call.
func BenchmarkObserve(b *testing.B) {
	m := newObserveMetrics()
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.observe("/dkv.v1.KV/Put", start, nil)
		}
	})
}

// observe counts each request under its method and status code, and
// times it under its method, however many methods and codes interleave.
func TestObserveCountsByMethodAndCode(t *testing.T) {
	m := newObserveMetrics()
	start := time.Now()
	locked := dkverr.New(dkverr.Locked, "locked")
	for range 3 {
		m.observe("/dkv.v1.KV/Put", start, nil)
		m.observe("/dkv.v1.KV/Put", start, locked)
		m.observe("/dkv.v1.KV/Range", start, nil)
	}
	m.observe("/dkv.v1.KV/Put", start, dkverr.New(dkverr.Code(99), "from the future"))
	for _, c := range []struct {
		method, code string
		want         float64
	}{
		{"/dkv.v1.KV/Put", "OK", 3},
		{"/dkv.v1.KV/Put", "Locked", 3},
		{"/dkv.v1.KV/Range", "OK", 3},
		{"/dkv.v1.KV/Range", "Locked", 0},
		{"/dkv.v1.KV/Put", "Code(99)", 1},
	} {
		var got dto.Metric
		if err := m.requests.WithLabelValues(c.method, c.code).Write(&got); err != nil {
			t.Fatal(err)
		}
		if got.GetCounter().GetValue() != c.want {
			t.Errorf("requests{%s,%s} = %v, want %v", c.method, c.code, got.GetCounter().GetValue(), c.want)
		}
	}
	ch := make(chan prometheus.Metric, 10)
	m.latency.Collect(ch)
	close(ch)
	for hm := range ch {
		var got dto.Metric
		if err := hm.Write(&got); err != nil {
			t.Fatal(err)
		}
		want := uint64(7) // Put: 3 OK, 3 Locked, 1 unknown code
		if got.GetLabel()[0].GetValue() == "/dkv.v1.KV/Range" {
			want = 3
		}
		if got.GetHistogram().GetSampleCount() != want {
			t.Errorf("latency %v: %d samples, want %d", got.GetLabel(), got.GetHistogram().GetSampleCount(), want)
		}
	}
}
