package bench

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// TestLeaseKeepAliveOpsEqualAcks checks each reported keep-alive op is
// exactly one acknowledgment received on a stream, and that the run's
// leases are revoked afterwards.
func TestLeaseKeepAliveOpsEqualAcks(t *testing.T) {
	ep, _ := startServer(t)
	res := run(t, Options{Workload: "lease-keepalive", Endpoints: []string{ep}, Clients: 6, Conns: 2, Total: 600, Keys: 20})
	if res.Ops != 600 || res.OK != 600 || len(res.Errors) != 0 {
		t.Fatalf("ops=%d ok=%d errors=%v, want 600 successful", res.Ops, res.OK, res.Errors)
	}
	if res.Extra["acked"] != 600 || res.Extra["leases"] != 20 {
		t.Fatalf("extra=%v, want acked=600 leases=20", res.Extra)
	}
	conn := dialTest(t, ep)
	ls, err := dkvpb.NewLeaseClient(conn).Leases(context.Background(), &dkvpb.LeaseLeasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Leases) != 0 {
		t.Fatalf("%d leases left after the run", len(ls.Leases))
	}
}

// TestLeaseKeepAliveMoreClientsThanLeases: clients share leases.
func TestLeaseKeepAliveMoreClientsThanLeases(t *testing.T) {
	ep, _ := startServer(t)
	res := run(t, Options{Workload: "lease-keepalive", Endpoints: []string{ep}, Clients: 5, Conns: 2, Total: 100, Keys: 2})
	if res.OK != 100 || res.Extra["acked"] != 100 {
		t.Fatalf("ok=%d errors=%v extra=%v", res.OK, res.Errors, res.Extra)
	}
}

// TestWatchDeliversPutsTimesWatchers: with nothing dropped, every put
// reaches every watcher exactly once.
func TestWatchDeliversPutsTimesWatchers(t *testing.T) {
	ep, kv := startServer(t)
	before := revision(t, kv)
	res := run(t, Options{Workload: "watch", Endpoints: []string{ep}, Clients: 4, Conns: 3, Total: 200, Keys: 50, Watchers: 10, ValueSize: 64})
	if res.Ops != 200 || res.OK != 200 || len(res.Errors) != 0 {
		t.Fatalf("ops=%d ok=%d errors=%v", res.Ops, res.OK, res.Errors)
	}
	if got := revision(t, kv) - before; got != 200 {
		t.Fatalf("revision moved by %d, want 200 puts", got)
	}
	e := res.Extra
	if e["events"] != 2000 || e["expected_events"] != 2000 || e["watchers"] != 10 || e["unstamped_events"] != 0 || e["watches_canceled"] != 0 {
		t.Fatalf("extra=%v, want 2000 events from 200 puts × 10 watchers", e)
	}
	if e["events_per_sec"] <= 0 || e["event_p50_ms"] <= 0 || e["event_p50_ms"] > e["event_p99_ms"] || e["event_p99_ms"] > e["event_max_ms"] {
		t.Fatalf("event metrics missing or out of order: %v", e)
	}
}

// TestWatchWritesOnlyUnderPrefix: the writers write only under the
// watch prefix.
func TestWatchWritesOnlyUnderPrefix(t *testing.T) {
	ep, kv := startServer(t)
	o := Options{Workload: "watch", Endpoints: []string{ep}, Clients: 2, Total: 30, Keys: 1000, Watchers: 1}
	res := run(t, o)
	o.EnsureDefaults()
	got, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte(WatchPrefix(&o)), Prefix: true, CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	all, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte(o.KeyPrefix), Prefix: true, CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Count == 0 || got.Count != all.Count || res.Extra["events"] != 30 {
		t.Fatalf("%d keys under the watch prefix, %d under the bench prefix, extra=%v", got.Count, all.Count, res.Extra)
	}
}

func dialTest(t *testing.T, ep string) *grpc.ClientConn {
	t.Helper()
	o := Options{Endpoints: []string{ep}, Conns: 1, Clients: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conns, err := dialAll(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conns[0].Close() })
	return conns[0]
}
