package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTotalRunsExactlyTotalOps checks the op accounting with a fake
// system: every third op of each client fails with Aborted.
func TestTotalRunsExactlyTotalOps(t *testing.T) {
	var calls atomic.Int64
	res, err := Run(context.Background(), RunConfig{Workload: "fake", Clients: 7, Total: 1000}, func(i int) (Worker, error) {
		n := 0
		return WorkerFunc(func(context.Context) error {
			calls.Add(1)
			n++
			if n%3 == 0 {
				return status.Error(codes.Aborted, "lost")
			}
			return nil
		}), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 1000 || res.Ops != 1000 {
		t.Fatalf("calls=%d ops=%d, want 1000", calls.Load(), res.Ops)
	}
	if res.OK+res.Errors["Aborted"] != 1000 || len(res.Errors) != 1 || res.ErrorCount() != res.Errors["Aborted"] {
		t.Fatalf("ok=%d errors=%v", res.OK, res.Errors)
	}
	if uint64(res.OK) == 0 || res.Latency.Max < res.Latency.P50 {
		t.Fatalf("latency %+v for %d ok ops", res.Latency, res.OK)
	}
}

func TestCanceledRunStopsAndReportsWhatCompleted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	res, err := Run(ctx, RunConfig{Workload: "fake", Clients: 4, Duration: time.Hour}, func(i int) (Worker, error) {
		return WorkerFunc(func(ctx context.Context) error {
			if calls.Add(1) == 100 {
				cancel()
			}
			<-time.After(time.Microsecond)
			return ctx.Err()
		}), nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want canceled", err)
	}
	// Ops interrupted by the cancel are neither successes nor failures.
	if len(res.Errors) != 0 || res.OK > calls.Load() || res.OK == 0 {
		t.Fatalf("ok=%d errors=%v after %d calls", res.OK, res.Errors, calls.Load())
	}
}

func TestRateLimitSpacesOps(t *testing.T) {
	start := time.Now()
	res, err := Run(context.Background(), RunConfig{Workload: "fake", Clients: 4, Total: 20, Rate: 200}, func(int) (Worker, error) {
		return WorkerFunc(func(context.Context) error { return nil }), nil
	})
	if err != nil || res.OK != 20 {
		t.Fatalf("ok=%d err=%v", res.OK, err)
	}
	// 20 ops at 200/s start over at least 19 intervals of 5ms: an
	// ordering fact of the pacer, not a speed assertion.
	if el := time.Since(start); el < 19*5*time.Millisecond {
		t.Fatalf("20 ops at 200/s finished in %v", el)
	}
}

func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	_, err := Run(context.Background(), RunConfig{Workload: "fake", Clients: 1, Duration: 50 * time.Millisecond, Progress: &buf, ProgressInterval: 10 * time.Millisecond},
		func(int) (Worker, error) {
			return WorkerFunc(func(context.Context) error { time.Sleep(time.Millisecond); return nil }), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("fake: ")) {
		t.Fatalf("no progress line: %q", buf.String())
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	in := &Result{Workload: "put", Clients: 3, Ops: 10, OK: 9, OpsPerSec: 4.5, Elapsed: 2 * time.Second,
		Errors:  map[string]int64{"Conflict": 1},
		Latency: Latency{P50: 1500 * time.Microsecond, P99: 3 * time.Millisecond, Max: time.Second}}
	var buf bytes.Buffer
	if err := in.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"p50_ms": 1.5`)) || !bytes.Contains(buf.Bytes(), []byte(`"elapsed_seconds": 2`)) {
		t.Fatalf("json: %s", buf.String())
	}
	var out Result
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Latency != in.Latency || out.Elapsed != in.Elapsed || out.OK != 9 || out.Errors["Conflict"] != 1 {
		t.Fatalf("round trip: %+v", out)
	}
}
