package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

func testConfig() config {
	return config{
		nodes: 3, duration: time.Second, clients: 64, conns: 8, keys: 100, valueSize: 256,
		watchers: 100, watchW: 8, leases: 10, prefix: keyPrefix, readRatio: 0.9,
		systems: []string{"etcd", "dkv"}, workloads: []string{"put", "watch"},
		curveClients: []int{1, 4}, curveWatchers: []int{100, 1000}, curveDuration: time.Second, curveLargeKeys: 10,
	}
}

func fakeResult(op string, ok int64, opsPerSec float64) *runner.Result {
	return &runner.Result{Workload: op, OK: ok, Ops: ok, OpsPerSec: opsPerSec,
		Latency: runner.Latency{P50: time.Millisecond, P99: 4 * time.Millisecond}}
}

// cellsByHeader maps the table's header to one row's cells.
func cellsByHeader(c config, r row) map[string]string {
	h, cells := header(c), r.cells(c)
	out := map[string]string{}
	for i := range h {
		out[h[i]] = cells[i]
	}
	return out
}

// TestTableCPUColumns: each system's CPU-ms per 1,000 ops is its servers'
// CPU-seconds over the row's successful ops (delivered events for watch),
// and DKV/etcd is their ratio; a system whose /proc was not read shows -.
func TestTableCPUColumns(t *testing.T) {
	c := testConfig()
	watchEtcd := fakeResult("watch", 1000, 1000)
	watchEtcd.Extra = map[string]float64{"events": 100000, "expected_events": 100000, "events_per_sec": 100000, "event_p50_ms": 1, "event_p99_ms": 2}
	ms := []measurement{
		// 2.47 CPU-s for 10,000 puts: 247 ms per 1,000.
		{Workload: "put", System: "etcd", Result: fakeResult("put", 10000, 5000), Server: &serverUsage{CPUSeconds: 2.47}},
		{Workload: "put", System: "dkv", Result: fakeResult("put", 10000, 5000), Server: &serverUsage{CPUSeconds: 3.14}},
		// 5 CPU-s for 100,000 events: 50 ms per 1,000 events.
		{Workload: "watch", System: "etcd", Result: watchEtcd, Server: &serverUsage{CPUSeconds: 5}},
		{Workload: "watch", System: "dkv", Result: fakeResult("watch", 1000, 1000)},
	}
	tab := renderTable(c, ms)
	put := cellsByHeader(c, tab.rows[0])
	if put["etcd CPU-ms/1k"] != "247.0" || put["DKV CPU-ms/1k"] != "314.0" || put["DKV/etcd CPU"] != "1.27x" {
		t.Errorf("put row CPU cells: etcd %q, DKV %q, ratio %q; want 247.0, 314.0, 1.27x",
			put["etcd CPU-ms/1k"], put["DKV CPU-ms/1k"], put["DKV/etcd CPU"])
	}
	watch := cellsByHeader(c, tab.rows[1])
	if watch["etcd CPU-ms/1k"] != "50.0" || watch["DKV CPU-ms/1k"] != "-" || watch["DKV/etcd CPU"] != "-" {
		t.Errorf("watch row CPU cells: etcd %q, DKV %q, ratio %q; want 50.0, -, -",
			watch["etcd CPU-ms/1k"], watch["DKV CPU-ms/1k"], watch["DKV/etcd CPU"])
	}
	md := renderMarkdown(c, machine{}, tab)
	if !strings.Contains(md, "| etcd CPU-ms/1k | DKV CPU-ms/1k | DKV/etcd CPU |") {
		t.Errorf("markdown header lacks the CPU columns:\n%s", md)
	}
}

func TestCurvePoints(t *testing.T) {
	c := testConfig()
	c.curves = []string{"put-64k", "watchers"}
	pts := c.curvePoints()
	var names []string
	for _, w := range pts {
		names = append(names, w.name)
	}
	if got, want := strings.Join(names, ","), "put-64k@1,put-64k@4,watchers@100,watchers@1000"; got != want {
		t.Fatalf("points %s, want %s", got, want)
	}
	big := pts[1].apply(c)
	if clients, conns := pts[1].params(big); clients != 4 || conns != 4 || big.valueSize != 64<<10 || big.keys != 10 || big.prefix != largePrefix || big.duration != time.Second {
		t.Errorf("put-64k@4 runs clients=%d conns=%d value=%d keys=%d prefix=%q duration=%v", clients, conns, big.valueSize, big.keys, big.prefix, big.duration)
	}
	w := pts[3].apply(c)
	if clients, _ := pts[3].params(w); clients != c.watchW || w.watchers != 1000 {
		t.Errorf("watchers@1000 runs %d writers, %d watchers; want %d, 1000", clients, w.watchers, c.watchW)
	}
	// Curves run on etcd and DKV only, after the table rows.
	if n := len(c.jobs("dkv")); n != len(c.workloads)+len(pts) {
		t.Errorf("dkv runs %d jobs, want %d", n, len(c.workloads)+len(pts))
	}
	if n := len(c.jobs("zk")); n != len(c.workloads) {
		t.Errorf("zk runs %d jobs, want the %d table rows", n, len(c.workloads))
	}
}

// TestWriteCurves: the plots are PNGs, the CSV has a line per point and
// system, and curves.md links every plot.
func TestWriteCurves(t *testing.T) {
	c := testConfig()
	c.curves = []string{"put", "watchers"}
	var ms []measurement
	for _, w := range c.curvePoints() {
		for i, sys := range curveSystems {
			res := fakeResult(w.op, 1000*int64(w.x), 100*float64(w.x*(i+1)))
			if w.op == "watch" {
				res.Extra = map[string]float64{"events": 1e5, "events_per_sec": 1e4 * float64(i+1), "event_p99_ms": 3}
			}
			ms = append(ms, measurement{Workload: w.name, Curve: w.curve, X: w.x, System: sys, Result: res,
				Server: &serverUsage{CPUSeconds: 1, RSSBefore: 100 << 20, RSSPeak: 110 << 20}})
		}
	}
	// A failed point leaves a gap, not a failure of the whole output.
	ms[0].Err, ms[0].Result = "boom", nil
	dir := t.TempDir()
	if err := writeCurves(c, machine{}, dir, ms); err != nil {
		t.Fatal(err)
	}
	for _, name := range c.curves {
		b, err := os.ReadFile(filepath.Join(dir, name+".png"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(b)); err != nil {
			t.Errorf("%s.png: %v", name, err)
		}
	}
	f, err := os.Open(filepath.Join(dir, "curves.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(recs), 1+len(ms); got != want {
		t.Errorf("curves.csv has %d lines, want %d (header + one per point and system)", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "curves.json")); err != nil {
		t.Error(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "curves.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"![put](put.png)", "![watchers](watchers.png)", "| 1 | - | 200 | - |", "etcd: FAILED"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("curves.md lacks %q:\n%s", want, md)
		}
	}
	// 10 MiB of growth over 1000 watchers: 10.24 KiB each.
	if !strings.Contains(string(md), "| 1000 |") || !strings.Contains(string(md), "| 10.2 | 10.2 |") {
		t.Errorf("curves.md: watchers@1000 should show 10.2 KiB per watcher for both:\n%s", md)
	}
}

// TestTableCPUColumnsZK: with ZooKeeper, its CPU column and DKV/ZK sit
// beside etcd's, and a row ZooKeeper has no equivalent of shows n/a.
func TestTableCPUColumnsZK(t *testing.T) {
	c := testConfig()
	c.systems = []string{"etcd", "zk", "dkv"}
	c.workloads = []string{"lease-keepalive"}
	ms := []measurement{
		{Workload: "lease-keepalive", System: "etcd", Result: fakeResult("lease-keepalive", 2000, 1000), Server: &serverUsage{CPUSeconds: 1}},
		{Workload: "lease-keepalive", System: "zk", NA: "sessions, not leases"},
		{Workload: "lease-keepalive", System: "dkv", Result: fakeResult("lease-keepalive", 1000, 500), Server: &serverUsage{CPUSeconds: 1}},
	}
	got := cellsByHeader(c, renderTable(c, ms).rows[0])
	for col, want := range map[string]string{
		"etcd CPU-ms/1k": "500.0", "ZK CPU-ms/1k": "n/a", "DKV CPU-ms/1k": "1000.0",
		"DKV/etcd CPU": "2.00x", "DKV/ZK CPU": "n/a",
	} {
		if got[col] != want {
			t.Errorf("%s = %q, want %q", col, got[col], want)
		}
	}
}

// The get-big curve reads -bigkeys keys under its own prefix and shows
// p50 beside p99; -restart's measurements get their own curves.md table.
func TestGetBigCurveAndRestartTable(t *testing.T) {
	c := testConfig()
	c.curves, c.bigKeys = []string{"get-big"}, 20
	pts := c.curvePoints()
	if len(pts) != 2 {
		t.Fatalf("%d get-big points, want 2", len(pts))
	}
	w := pts[1].apply(c)
	if clients, _ := pts[1].params(w); clients != 4 || w.keys != 20 || w.prefix != bigPrefix || pts[1].op != "get" {
		t.Errorf("get-big@4 runs %s with clients=%d keys=%d prefix=%q", pts[1].op, clients, w.keys, w.prefix)
	}
	d, _ := curveByName("get-big")
	var shorts []string
	for _, m := range curveMetrics(d) {
		shorts = append(shorts, m.short)
	}
	if got, want := strings.Join(shorts, ","), "ops/s,p50 ms,p99 ms,CPU-ms/1k"; got != want {
		t.Errorf("get-big metrics %s, want %s", got, want)
	}
	if md := restartMarkdown(c, nil); md != "" {
		t.Errorf("restart table without restart measurements: %q", md)
	}
	md := restartMarkdown(c, []measurement{
		{Workload: restartWorkload, System: "dkv", Result: &runner.Result{Workload: restartWorkload, Extra: map[string]float64{"restart_ms": 812}}},
		{Workload: restartWorkload, System: "etcd", Err: "boom"},
	})
	for _, want := range []string{"over 20 keys", "| etcd | error: boom |", "| DKV | 812 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("restart table lacks %q:\n%s", want, md)
		}
	}
	if strings.Index(md, "| etcd") > strings.Index(md, "| DKV") {
		t.Errorf("restart table not in etcd, DKV order:\n%s", md)
	}
}

// The queue row shows jobs/s and the enqueue→claim latency, not the
// runner's ops (enqueues and dequeues mixed), and counts CPU per job.
func TestQueueRowShowsJobs(t *testing.T) {
	res := &runner.Result{Workload: "queue", OK: 5000, OpsPerSec: 2500,
		Extra: map[string]float64{"jobs_acked": 1000, "jobs_per_s": 480, "claim_latency_p50_ms": 3, "claim_latency_p99_ms": 40}}
	if got := rate(res); got != 480 {
		t.Errorf("rate = %v, want jobs_per_s 480", got)
	}
	if got := lat(res, "p99"); got != 40*time.Millisecond {
		t.Errorf("p99 = %v, want the claim latency 40ms", got)
	}
	m := &measurement{Workload: "queue", System: "dkv", Result: res}
	if m.ops() != 1000 || m.opUnit() != "jobs" {
		t.Errorf("ops %v %s, want 1000 jobs", m.ops(), m.opUnit())
	}
}

// TestCPUTableCores: the cores table divides the servers' and the load
// generator's CPU-seconds by the row's wall time, and shows - for a system
// whose servers were not measured.
func TestCPUTableCores(t *testing.T) {
	c := testConfig()
	ms := []measurement{
		{Workload: "put", System: "etcd", Result: fakeResult("put", 10000, 5000), Server: &serverUsage{CPUSeconds: 6, WallSeconds: 4}, ClientCPUSeconds: 2},
		{Workload: "put", System: "dkv", Result: fakeResult("put", 10000, 5000), Server: &serverUsage{CPUSeconds: 5, WallSeconds: 5}, ClientCPUSeconds: 2.5},
		{Workload: "watch", System: "etcd", Result: fakeResult("watch", 1000, 1000)},
	}
	got := cpuTable(c, renderTable(c, ms))
	for _, want := range []string{
		"| workload | etcd servers | etcd client | etcd total | DKV servers | DKV client | DKV total |",
		"| put | 1.50 | 0.50 | 2.00 | 1.00 | 0.50 | 1.50 |",
		"| watch | - | - | - | - | - | - |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("cores table lacks %q:\n%s", want, got)
		}
	}
}

// The report says how each system routes: DKV's writes to the leader by
// default, spread with -dkv-route spread.
func TestReportStatesRouting(t *testing.T) {
	c := testConfig()
	tab := renderTable(c, []measurement{{Workload: "put", System: "dkv", Result: fakeResult("put", 10, 10)}})
	md := renderMarkdown(c, machine{}, tab)
	want := "DKV: writes and keep-alive streams to the leader (dkv bench --route leader), as DKV's Go client does; etcd: clientv3, one member per client"
	if !strings.Contains(md, want) {
		t.Errorf("report lacks %q:\n%s", want, md)
	}
	c.dkvRoute = "spread"
	if md := renderMarkdown(c, machine{}, tab); !strings.Contains(md, "dkv bench --route spread") {
		t.Errorf("-dkv-route spread report does not say so:\n%s", md)
	}
}

// A curve whose every point failed (a preload that died) still gets its
// PNG and table, with gaps: it used to panic in gonum's log axis.
func TestWriteCurvesAllPointsFailed(t *testing.T) {
	c := testConfig()
	c.curves = []string{"get"}
	var ms []measurement
	for _, w := range c.curvePoints() {
		for _, sys := range curveSystems {
			ms = append(ms, measurement{Workload: w.name, Curve: w.curve, X: w.x, System: sys, Err: "preload: exit status 1"})
		}
	}
	dir := t.TempDir()
	if err := writeCurves(c, machine{}, dir, ms); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "get.png"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Errorf("get.png: %v", err)
	}
}

// TestTableEtcd37Column: with etcd's newest release beside Debian's, the
// table has its columns and every DKV ratio against both, through DKV's
// own API and through its etcd API; the report says which build it was,
// and the JSON carries its results and version.
func TestTableEtcd37Column(t *testing.T) {
	c := testConfig()
	c.systems = []string{"etcd", "etcd37", "dkv", "dkv-etcd"}
	c.workloads = []string{"put"}
	res := func(opsPerSec float64, p99 time.Duration) *runner.Result {
		r := fakeResult("put", 10000, opsPerSec)
		r.Latency.P99 = p99
		return r
	}
	ms := []measurement{
		{Workload: "put", System: "etcd", Result: res(4000, 20*time.Millisecond), Server: &serverUsage{CPUSeconds: 2}},
		{Workload: "put", System: "etcd37", Result: res(5000, 10*time.Millisecond), Server: &serverUsage{CPUSeconds: 4}},
		{Workload: "put", System: "dkv", Result: res(6000, 5*time.Millisecond), Server: &serverUsage{CPUSeconds: 3}},
		{Workload: "put", System: "dkv-etcd", Result: res(5500, 8*time.Millisecond), Server: &serverUsage{CPUSeconds: 1}},
	}
	tab := renderTable(c, ms)
	got := cellsByHeader(c, tab.rows[0])
	for col, want := range map[string]string{
		"etcd-3.7 ops/s": "5000", "etcd-3.7 p99": "10.0ms", "etcd-3.7 CPU-ms/1k": "400.0",
		"DKV/etcd": "1.50x", "DKV/etcd-3.7": "1.20x",
		"DKV etcd-API/etcd": "1.38x", "DKV etcd-API/etcd-3.7": "1.10x",
		"DKV/etcd p99": "0.25x", "DKV/etcd-3.7 p99": "0.50x",
		"DKV etcd-API/etcd p99": "0.40x", "DKV etcd-API/etcd-3.7 p99": "0.80x",
		"DKV/etcd CPU": "1.50x", "DKV/etcd-3.7 CPU": "0.75x",
		"DKV etcd-API/etcd CPU": "0.50x", "DKV etcd-API/etcd-3.7 CPU": "0.25x",
	} {
		if got[col] != want {
			t.Errorf("%s = %q, want %q", col, got[col], want)
		}
	}
	h := strings.Join(header(c), " | ")
	if want := "etcd ops/s | etcd-3.7 ops/s | DKV ops/s | DKV etcd-API ops/s | DKV/etcd | DKV/etcd-3.7 | DKV etcd-API/etcd | DKV etcd-API/etcd-3.7 | etcd p50"; !strings.Contains(h, want) {
		t.Errorf("header %q lacks %q", h, want)
	}

	m := machine{EtcdVersion: "3.4.23", Etcd37Version: "3.7.3", Etcd37Build: "go.etcd.io/etcd/server/v3 v3.7.3, go1.26.8",
		IdleCPU: map[string]float64{"etcd": 10, "etcd37": 12, "dkv": 8}}
	md := renderMarkdown(c, m, tab)
	for _, want := range []string{
		"# DKV vs etcd 3.4.23 and etcd 3.7.3, 3 node(s) on loopback",
		"with `make compare` (bench/compare)",
		"- etcd-3.7: etcd 3.7.3, etcd's own main (go.etcd.io/etcd/server/v3/etcdmain)",
		"(go.etcd.io/etcd/server/v3 v3.7.3, go1.26.8)",
		"etcd 10.0, etcd-3.7 12.0, DKV 8.0 CPU-ms per second",
		"DKV/etcd, DKV/etcd-3.7: throughput ratio",
		"DKV etcd-API/etcd, DKV etcd-API/etcd-3.7: its ratios to etcd",
		"| put | 64 | 4000 | 5000 | 6000 | 5500 | 1.50x | 1.20x | 1.38x | 1.10x |",
		"| etcd-3.7 servers | etcd-3.7 client | etcd-3.7 total |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	path := filepath.Join(t.TempDir(), "results.json")
	if err := writeJSON(path, m, ms); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine machine       `json:"machine"`
		Results []measurement `json:"results"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Machine.Etcd37Version != "3.7.3" || doc.Machine.Etcd37Build != m.Etcd37Build || doc.Results[1].System != "etcd37" || doc.Results[1].Result.OpsPerSec != 5000 {
		t.Errorf("JSON machine %+v, second result %+v; want etcd37 3.7.3 at 5000 ops/s", doc.Machine, doc.Results[1])
	}
}

// Without etcd37 (make compare ETCD37=0) the table is as before, and the
// report names the command that leaves it out; with ZooKeeper as well as
// etcd 3.7, the ZooKeeper notes are still there.
func TestTableEtcd37Selection(t *testing.T) {
	c := testConfig()
	c.workloads = []string{"put"}
	tab := renderTable(c, nil)
	if h := strings.Join(header(c), " | "); strings.Contains(h, "etcd-3.7") {
		t.Errorf("header without etcd37 has its columns: %s", h)
	}
	md := renderMarkdown(c, machine{EtcdVersion: "3.4.23"}, tab)
	for _, want := range []string{"# DKV vs etcd 3.4.23, 3 node(s)", "`make compare ETCD37=0 ETCDAPI=0`"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "etcd-3.7") {
		t.Errorf("markdown without etcd37 mentions it:\n%s", md)
	}

	c.systems = []string{"etcd", "etcd37", "zk", "dkv"}
	if h, want := strings.Join(header(c), " | "), "DKV/etcd | DKV/etcd-3.7 | DKV/ZK | etcd p50"; !strings.Contains(h, want) {
		t.Errorf("header %q lacks %q", h, want)
	}
	md = renderMarkdown(c, machine{}, renderTable(c, nil))
	for _, want := range []string{"# DKV vs etcd, etcd 3.7 and ZooKeeper", "`make compare ZK=1 ETCDAPI=0`", "ZooKeeper, row by row", "n/a: no fair equivalent"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
