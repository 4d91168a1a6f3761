package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/proxy"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
)

func TestFanoutValueRoundTrip(t *testing.T) {
	v := fanoutValue([]byte("filler|with:bars"), 0xbeef, 3, 4711, time.Unix(0, 42))
	k, s, ok := parseFanoutSeq(v, 0xbeef)
	if !ok || k != 3 || s != 4711 {
		t.Fatalf("parseFanoutSeq(%q) = %d, %d, %v; want writer 3, 4711", v, k, s, ok)
	}
	if _, s, ok := parseFanoutSeq(v, 0xbeee); ok {
		t.Fatalf("another run's value %q parsed as sequence number %d", v, s)
	}
	stamp := string(v[:20])
	for _, bad := range []string{"", "short", strings.Repeat("x", 40), stamp + "|", stamp + "beef:1:0|x", stamp + "beef:1:12", stamp + "beef:4711|", stamp + ":1:1|", stamp + "beef:-1:1|", stamp + "beef::1|"} {
		if _, s, ok := parseFanoutSeq([]byte(bad), 0xbeef); ok {
			t.Errorf("parseFanoutSeq(%q) = %d, want no sequence number", bad, s)
		}
	}
}

// TestSeqCheck feeds one watcher's deliveries to the checker and compares
// its verdict with what happened to the acknowledged puts 1..6 (all
// acknowledged unless unacked lists some).
func TestSeqCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		got     []int64
		unacked []int64
		want    checkResult
	}{
		{"in order", []int64{1, 2, 3, 4, 5, 6}, nil, checkResult{}},
		{"tail missing", []int64{1, 2, 3}, nil, checkResult{missing: 3}},
		{"nothing", nil, nil, checkResult{missing: 6}},
		{"gap", []int64{1, 2, 5, 6}, nil, checkResult{missing: 2}},
		{"gap of a failed put", []int64{1, 2, 4, 5, 6}, []int64{3}, checkResult{}},
		{"tail of a failed put", []int64{1, 2, 3, 4, 5}, []int64{6}, checkResult{}},
		{"failed put delivered", []int64{1, 2, 3, 4, 5, 6}, []int64{3}, checkResult{}},
		{"duplicate of the last", []int64{1, 2, 2, 3, 4, 5, 6}, nil, checkResult{dups: 1}},
		{"duplicate of an older one", []int64{1, 2, 3, 4, 2, 5, 6}, nil, checkResult{dups: 1}},
		{"swapped", []int64{1, 3, 2, 4, 5, 6}, nil, checkResult{reorders: 1}},
		{"late into a wide gap", []int64{1, 5, 3, 6}, nil, checkResult{missing: 2, reorders: 1}},
		{"late twice", []int64{1, 5, 3, 3, 6}, nil, checkResult{missing: 2, reorders: 1, dups: 1}},
		{"reversed", []int64{6, 5, 4, 3, 2, 1}, nil, checkResult{reorders: 5}},
		{"beyond the acknowledged", []int64{1, 2, 3, 4, 5, 6, 7}, nil, checkResult{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acked := make([]bool, 7)
			for s := 1; s <= 6; s++ {
				acked[s] = true
			}
			for _, s := range tc.unacked {
				acked[s] = false
			}
			var c seqCheck
			for _, s := range tc.got {
				c.see(s)
			}
			if got := checkAll([]seqCheck{c}, acked); got != tc.want {
				t.Fatalf("deliveries %v: got %+v, want %+v", tc.got, got, tc.want)
			}
		})
	}
}

// TestSeqCheckSumsWatchers: each watcher is judged on its own stream.
func TestSeqCheckSumsWatchers(t *testing.T) {
	acked := []bool{false, true, true, true}
	checks := make([]seqCheck, 3)
	for _, s := range []int64{1, 2, 3} {
		checks[0].see(s)
	}
	for _, s := range []int64{1, 3} {
		checks[1].see(s)
	}
	for _, s := range []int64{2, 1, 3, 3} {
		checks[2].see(s)
	}
	want := checkResult{missing: 1, reorders: 1, dups: 1}
	if got := checkAll(checks, acked); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func checkFanout(t *testing.T, res *Result, watchers, conns int) {
	t.Helper()
	e := res.Extra
	if res.OK == 0 || len(res.Errors) != 0 {
		t.Fatalf("ok=%d errors=%v", res.OK, res.Errors)
	}
	if e["puts_acked"] != float64(res.OK) || e["watchers"] != float64(watchers) || e["watch_conns"] != float64(conns) {
		t.Fatalf("extra=%v, want %d acked puts, %d watchers over %d conns", e, res.OK, watchers, conns)
	}
	if want := float64(res.OK) * float64(watchers); e["events"] != want || e["expected_events"] != want {
		t.Fatalf("extra=%v, want %g events", e, want)
	}
	if e["anomalies"] != 0 || e["missing"] != 0 || e["duplicate"] != 0 || e["out_of_order"] != 0 || e["stream_errors"] != 0 {
		t.Fatalf("anomalies in %v", e)
	}
	if err := FanoutAnomalies(res); err != nil {
		t.Fatal(err)
	}
}

// TestWatchFanoutDirect: every watcher on a member gets every put of
// three concurrent writers, in order.
func TestWatchFanoutDirect(t *testing.T) {
	ep, _ := startServer(t)
	res := run(t, Options{Workload: "watch-fanout", Endpoints: []string{ep}, Clients: 3, Total: 30, Watchers: 200, WatchConns: 20, ValueSize: 32})
	checkFanout(t, res, 200, 20)
}

// TestWatchFanoutThroughProxies: the same through two proxies (whose
// watchers share upstream watches; the proxy's own tests count those).
func TestWatchFanoutThroughProxies(t *testing.T) {
	n := servertest.Start(t, servertest.WithClientPort())
	var eps []string
	for range 2 {
		p, err := proxy.Start(proxy.Config{ListenAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Endpoints: []string{n.Srv.ClientAddr()}, Logger: testutil.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		eps = append(eps, p.Addr())
	}
	res := run(t, Options{Workload: "watch-fanout", Endpoints: eps, Route: RouteSpread, Clients: 3, Total: 30, Watchers: 200, WatchConns: 20, ValueSize: 32})
	checkFanout(t, res, 200, 20)
}
