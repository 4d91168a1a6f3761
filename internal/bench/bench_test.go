package bench

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// startServer runs a single in-process node listening on a loopback port
// and returns its endpoint and a KV client for checking outcomes.
func startServer(t *testing.T, opts ...servertest.Option) (string, dkvpb.KVClient) {
	t.Helper()
	n := servertest.Start(t, append([]servertest.Option{servertest.WithClientPort()}, opts...)...)
	return n.Srv.ClientAddr(), n.KV
}

func revision(t *testing.T, kv dkvpb.KVClient) int64 {
	t.Helper()
	resp, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("\x00")})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func run(t *testing.T, o Options) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Bench(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: ops=%d ok=%d errors=%v p50=%v", o.Workload, res.Ops, res.OK, res.Errors, res.Latency.P50)
	return res
}

func TestPutOpsEqualAppliedRevisions(t *testing.T) {
	ep, kv := startServer(t)
	before := revision(t, kv)
	res := run(t, Options{Workload: "put", Endpoints: []string{ep}, Clients: 8, Conns: 3, Total: 500, Keys: 100, ValueSize: 64})
	if res.Ops != 500 || res.OK != 500 || len(res.Errors) != 0 {
		t.Fatalf("ops=%d ok=%d errors=%v, want 500 successful", res.Ops, res.OK, res.Errors)
	}
	if got := revision(t, kv) - before; got != 500 {
		t.Fatalf("store revision moved by %d, the benchmark reported %d puts", got, res.OK)
	}
	if res.Latency.P50 <= 0 || res.Latency.P50 > res.Latency.P99 || res.Latency.P99 > res.Latency.Max {
		t.Fatalf("latency summary out of order: %+v", res.Latency)
	}
}

// TestDurationRunCountsEveryAppliedPut checks the end of a timed run: ops
// in flight when the duration ends finish and are counted, none is lost.
func TestDurationRunCountsEveryAppliedPut(t *testing.T) {
	ep, kv := startServer(t)
	before := revision(t, kv)
	var progress bytes.Buffer
	res := run(t, Options{Workload: "put", Endpoints: []string{ep}, Clients: 16, Duration: 1500 * time.Millisecond, Progress: &progress})
	if res.OK == 0 || len(res.Errors) != 0 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.Errors)
	}
	if got := revision(t, kv) - before; got != res.OK {
		t.Fatalf("store revision moved by %d, the benchmark reported %d puts", got, res.OK)
	}
	if !bytes.Contains(progress.Bytes(), []byte("put: ")) {
		t.Fatalf("no progress line in %q", progress.String())
	}
}

func TestCounterSumEqualsSuccessfulOps(t *testing.T) {
	ep, kv := startServer(t)
	o := Options{Workload: "counter", Endpoints: []string{ep}, Clients: 8, Total: 300, Keys: 5}
	res := run(t, o)
	if res.OK != 300 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.Errors)
	}
	o.EnsureDefaults()
	got, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte(CounterPrefix(&o)), Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, kv := range got.Kvs {
		n, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			t.Fatalf("%s = %q", kv.Key, kv.Value)
		}
		sum += n
	}
	if sum != res.OK || len(got.Kvs) > 5 {
		t.Fatalf("counters sum to %d over %d keys, benchmark reported %d increments", sum, len(got.Kvs), res.OK)
	}
}

// TestTxnCountsLostRacesAsConflict makes 8 clients CAS one key, so some
// lose; each win is exactly one revision and each loss is a Conflict.
func TestTxnCountsLostRacesAsConflict(t *testing.T) {
	ep, kv := startServer(t)
	before := revision(t, kv)
	res := run(t, Options{Workload: "txn", Endpoints: []string{ep}, Clients: 8, Total: 200, Keys: 1})
	if res.Ops != 200 || res.OK+res.Errors["Conflict"] != 200 || len(res.Errors) > 1 {
		t.Fatalf("ops=%d ok=%d errors=%v", res.Ops, res.OK, res.Errors)
	}
	if got := revision(t, kv) - before; got != res.OK {
		t.Fatalf("store revision moved by %d, benchmark reported %d successful CAS", got, res.OK)
	}
	got, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("bench/0000000000")})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || got.Kvs[0].Version != res.OK {
		t.Fatalf("key version %v, want %d", got.Kvs, res.OK)
	}
}

func TestErrorsCountedByCode(t *testing.T) {
	ep, kv := startServer(t, servertest.WithConfig(func(c *server.Config) { c.MaxValueBytes = 1024 }))
	before := revision(t, kv)
	res := run(t, Options{Workload: "put", Endpoints: []string{ep}, Clients: 4, Total: 50, ValueSize: 2048})
	if res.Ops != 50 || res.OK != 0 || res.Errors["InvalidInput"] != 50 || len(res.Errors) != 1 {
		t.Fatalf("ops=%d ok=%d errors=%v, want 50 InvalidInput", res.Ops, res.OK, res.Errors)
	}
	if res.OpsPerSec != 0 {
		t.Fatalf("failed ops counted as throughput: %v ops/s", res.OpsPerSec)
	}
	if got := revision(t, kv) - before; got != 0 {
		t.Fatalf("rejected puts moved the revision by %d", got)
	}
}

func TestUnreachableEndpointCountsUnavailable(t *testing.T) {
	// A port nothing listens on: reserved by a server we stop at once.
	s, err := server.New(server.Config{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ep := s.ClientAddr()
	s.Stop()
	res := run(t, Options{Workload: "get", Endpoints: []string{ep}, Clients: 2, Total: 10, NoPreload: true, OpTimeout: 2 * time.Second})
	if res.Ops != 10 || res.OK != 0 || res.Errors["Unavailable"] != 10 {
		t.Fatalf("ops=%d ok=%d errors=%v, want 10 Unavailable", res.Ops, res.OK, res.Errors)
	}
}

func TestGetPreloadsKeySpace(t *testing.T) {
	ep, kv := startServer(t)
	before := revision(t, kv)
	var revs []int64
	for _, serializable := range []bool{false, true} {
		res := run(t, Options{Workload: "get", Endpoints: []string{ep}, Clients: 4, Total: 200, Keys: 250, Serializable: serializable})
		if res.OK != 200 || len(res.Errors) != 0 {
			t.Fatalf("serializable=%v: ok=%d errors=%v", serializable, res.OK, res.Errors)
		}
		revs = append(revs, revision(t, kv))
	}
	// The first run preloaded the 250 keys, in txns of up to 100 puts (3
	// revisions); the second found them and wrote none.
	got, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("bench/"), Prefix: true, CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 250 {
		t.Fatalf("%d keys after the preload, want 250", got.Count)
	}
	if revs[0]-before != 3 {
		t.Fatalf("the preload took %d revisions, want 3 txns", revs[0]-before)
	}
	if revs[1] != revs[0] {
		t.Fatalf("the second run wrote (revision %d -> %d) to a full key space", revs[0], revs[1])
	}
}

func TestMixedWritesOnlyItsPuts(t *testing.T) {
	ep, kv := startServer(t)
	before := revision(t, kv)
	res := run(t, Options{Workload: "mixed", Endpoints: []string{ep}, Clients: 4, Total: 300, Keys: 1000, ReadRatio: 0.5, NoPreload: true})
	if res.OK != 300 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.Errors)
	}
	// Half reads, half writes: the chance of all 300 one way is 2^-299.
	if got := revision(t, kv) - before; got <= 0 || got >= 300 {
		t.Fatalf("revision moved by %d for 300 mixed ops at read ratio 0.5", got)
	}
}

func TestValidateRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Workload: "nope"},
		{Workload: "put", Clients: -1},
		{Workload: "mixed", ReadRatio: 1.5},
		{Workload: "put", Keys: -3},
		{Workload: "put", Route: "leder"},
	} {
		o.EnsureDefaults()
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}
