package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

type fsyncStats struct {
	Samples int           `json:"samples"`
	Mean    time.Duration `json:"mean_ns"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
}

func (f fsyncStats) String() string {
	return fmt.Sprintf("mean %s, p50 %s, p99 %s, max %s (%d samples)",
		runner.FormatLatency(f.Mean), runner.FormatLatency(f.P50), runner.FormatLatency(f.P99), runner.FormatLatency(f.Max), f.Samples)
}

// fsyncLatency times n rounds of writing 4 KiB and fdatasync in dir: what
// one durable raft log append costs on this disk at best.
func fsyncLatency(dir string, n int) (fsyncStats, error) {
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		return fsyncStats{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	var h runner.Histogram
	for i := range n {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(i)*int64(len(buf))); err != nil {
			return fsyncStats{}, err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return fsyncStats{}, err
		}
		h.Record(time.Since(t0))
	}
	return fsyncStats{Samples: n, Mean: h.Mean(), P50: h.Quantile(0.5), P99: h.Quantile(0.99), Max: h.Max()}, nil
}

type machine struct {
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	DKVCommit   string `json:"dkv_commit"`
	EtcdVersion string `json:"etcd_version,omitempty"`
	// Etcd37Version and Etcd37Build are the etcd37 system's: its
	// --version and what it was built from (etcdBuild).
	Etcd37Version string     `json:"etcd37_version,omitempty"`
	Etcd37Build   string     `json:"etcd37_build,omitempty"`
	ZKVersion     string     `json:"zookeeper_version,omitempty"`
	Fsync         fsyncStats `json:"fsync_4k"`
	// IdleCPU is each system's server CPU-ms per second with no load
	// (-idle), the fixed cost inside every row's CPU figure.
	IdleCPU map[string]float64 `json:"idle_server_cpu_ms_per_sec,omitempty"`
}

// idleLine says what the idle clusters used, or "" if not measured.
func (m machine) idleLine() string {
	var parts []string
	for _, s := range []string{"etcd", "etcd37", "zk", "dkv", "dkv-etcd"} {
		if v, ok := m.IdleCPU[s]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", systemLabels[s], v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Idle servers, no load (all members): " + strings.Join(parts, ", ") + " CPU-ms per second; every CPU figure includes this for the row's time"
}

func machineInfo(repo string) machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), CPUModel: "unknown", Kernel: "unknown", DKVCommit: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.DKVCommit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.DKVCommit += "+dirty"
		}
	}
	return m
}

func (m machine) summary() string {
	return fmt.Sprintf("%d CPUs (%s), Linux %s, %s, dkv %s", m.CPUs, m.CPUModel, m.Kernel, m.GoVersion, m.DKVCommit)
}

type row struct {
	workload workload
	bySystem map[string]*measurement
}

type table struct {
	rows []row
	text string
}

// columns are the systems the table shows, in column order: etcd and DKV
// always, etcd 3.7, ZooKeeper and DKV's etcd API when they ran; baselines
// are the ones DKV gets a ratio against.
func columns(c config) (shown, baselines []string) {
	baselines = []string{"etcd"}
	for _, s := range []string{"etcd37", "zk"} {
		if slices.Contains(c.systems, s) {
			baselines = append(baselines, s)
		}
	}
	shown = append(slices.Clone(baselines), "dkv")
	if slices.Contains(c.systems, "dkv-etcd") {
		shown = append(shown, "dkv-etcd")
	}
	return shown, baselines
}

// ratio is one ratio column: num's figure over base's.
type ratio struct{ num, base string }

func (r ratio) String() string { return systemLabels[r.num] + "/" + systemLabels[r.base] }

// ratios are the table's ratio columns, in order: DKV over each baseline,
// then, when DKV also ran through its etcd API, DKV etcd-API over each
// etcd release (one client, clientv3, for both).
func ratios(c config) []ratio {
	_, baselines := columns(c)
	var out []ratio
	for _, b := range baselines {
		out = append(out, ratio{"dkv", b})
	}
	if slices.Contains(c.systems, "dkv-etcd") {
		for _, b := range baselines {
			if b == "etcd" || b == "etcd37" {
				out = append(out, ratio{"dkv-etcd", b})
			}
		}
	}
	return out
}

func header(c config) []string {
	shown, _ := columns(c)
	rs := ratios(c)
	h := []string{"workload", "clients"}
	each := func(format string) {
		for _, s := range shown {
			h = append(h, fmt.Sprintf(format, systemLabels[s]))
		}
	}
	eachRatio := func(suffix string) {
		for _, r := range rs {
			h = append(h, r.String()+suffix)
		}
	}
	each("%s ops/s")
	eachRatio("")
	each("%s p50")
	each("%s p99")
	eachRatio(" p99")
	each("%s CPU-ms/1k")
	eachRatio(" CPU")
	return append(h, "errors")
}

func renderTable(c config, ms []measurement) table {
	var t table
	for _, name := range c.workloads {
		w, _ := workloadByName(name)
		r := row{workload: w, bySystem: map[string]*measurement{}}
		for i := range ms {
			if ms[i].Workload == name {
				r.bySystem[ms[i].System] = &ms[i]
			}
		}
		t.rows = append(t.rows, r)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header(c), "\t")+"\t")
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r.cells(c), "\t")+"\t")
	}
	tw.Flush()
	t.text = b.String()
	return t
}

func (r row) cells(c config) []string {
	clients, _ := r.workload.params(c)
	shown, _ := columns(c)
	rs := ratios(c)
	// The watch row compares delivered events/s and put→event latency
	// (Result.Extra), not the writers' put ops: rate and lat (curves.go).
	watch := r.workload.op == "watch"
	out := []string{r.workload.name, fmt.Sprint(clients)}
	// cell is one system's value; n/a where the system has no fair
	// equivalent, - where it did not run or failed.
	cell := func(sys string, f func(*runner.Result) string) string {
		m := r.bySystem[sys]
		if m != nil && m.NA != "" {
			return "n/a"
		}
		if res := m.result(); res != nil {
			return f(res)
		}
		return "-"
	}
	ratioOf := func(num, base string, f func(*runner.Result) float64) string {
		if m := r.bySystem[base]; m != nil && m.NA != "" {
			return "n/a"
		}
		if m := r.bySystem[num]; m != nil && m.NA != "" {
			return "n/a"
		}
		d, b := r.bySystem[num].result(), r.bySystem[base].result()
		if d == nil || b == nil || f(b) <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", f(d)/f(b))
	}
	for _, s := range shown {
		out = append(out, cell(s, func(res *runner.Result) string { return fmt.Sprintf("%.0f", rate(res)) }))
	}
	for _, q := range rs {
		out = append(out, ratioOf(q.num, q.base, rate))
	}
	for _, q := range []string{"p50", "p99"} {
		for _, s := range shown {
			out = append(out, cell(s, func(res *runner.Result) string { return runner.FormatLatency(lat(res, q)) }))
		}
	}
	for _, q := range rs {
		out = append(out, ratioOf(q.num, q.base, func(res *runner.Result) float64 { return float64(lat(res, "p99")) }))
	}
	// Server CPU per 1,000 ops (events for watch): "-" where /proc could
	// not be read.
	cpuCell := func(sys string) string {
		m := r.bySystem[sys]
		if m != nil && m.NA != "" {
			return "n/a"
		}
		if v, ok := m.cpuPer1k(); ok {
			return fmt.Sprintf("%.1f", v)
		}
		return "-"
	}
	for _, s := range shown {
		out = append(out, cpuCell(s))
	}
	cpuRatio := func(num, b string) string {
		if m := r.bySystem[b]; m != nil && m.NA != "" {
			return "n/a"
		}
		if m := r.bySystem[num]; m != nil && m.NA != "" {
			return "n/a"
		}
		d, okD := r.bySystem[num].cpuPer1k()
		e, okB := r.bySystem[b].cpuPer1k()
		if !okD || !okB || e <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", d/e)
	}
	for _, q := range rs {
		out = append(out, cpuRatio(q.num, q.base))
	}
	var errs []string
	for _, s := range shown {
		m := r.bySystem[s]
		switch {
		case m == nil || m.NA != "":
			continue
		case m.Err != "":
			errs = append(errs, m.System+": FAILED")
		case m.Result.ErrorCount() > 0:
			errs = append(errs, fmt.Sprintf("%s: %d %v", m.System, m.Result.ErrorCount(), m.Result.Errors))
		}
		if watch && m.Err == "" && m.Result.Extra["events"] != m.Result.Extra["expected_events"] {
			errs = append(errs, fmt.Sprintf("%s: %.0f of %.0f events delivered", m.System, m.Result.Extra["events"], m.Result.Extra["expected_events"]))
		}
	}
	if len(errs) == 0 {
		errs = []string{"0"}
	}
	return append(out, strings.Join(errs, "; "))
}

// ops is the count the row's rate is of: delivered events for a watch
// row, jobs acked for a queue row, successful ops otherwise.
func (m *measurement) ops() float64 {
	res := m.result()
	if res == nil {
		return 0
	}
	if ev, ok := res.Extra["events"]; ok && res.Workload == "watch" {
		return ev
	}
	if jobs, ok := res.Extra["jobs_acked"]; ok && res.Workload == "queue" {
		return jobs
	}
	return float64(res.OK)
}

func (m *measurement) opUnit() string {
	if res := m.result(); res != nil {
		switch res.Workload {
		case "watch":
			return "events"
		case "queue":
			return "jobs"
		}
	}
	return "ops"
}

// cpuPer1k is the CPU-milliseconds the system's server processes (every
// member) spent per 1,000 of the row's ops, from /proc/PID/stat read
// before and after the row.
func (m *measurement) cpuPer1k() (float64, bool) {
	if m == nil || m.Server == nil {
		return 0, false
	}
	n := m.ops()
	if n <= 0 {
		return 0, false
	}
	return m.Server.CPUSeconds * 1e3 / (n / 1e3), true
}

// rssPerWatcher is the growth of the members' summed RSS, from before the
// row to its peak, per watcher: what a watch costs the servers, roughly
// (it includes whatever else grew during the row).
func (m *measurement) rssPerWatcher(watchers int) (float64, bool) {
	if m == nil || m.Server == nil || m.result() == nil || watchers <= 0 {
		return 0, false
	}
	return float64(m.Server.RSSPeak-m.Server.RSSBefore) / float64(watchers), true
}

func (m *measurement) result() *runner.Result {
	// A run with no successful op has no latency to compare.
	if m == nil || m.Err != "" || m.Result == nil || m.Result.OK == 0 {
		return nil
	}
	return m.Result
}

func renderMarkdown(c config, m machine, t table) string {
	zk := slices.Contains(c.systems, "zk")
	etcd37 := slices.Contains(c.systems, "etcd37")
	_, baselines := columns(c)
	// The title names each baseline by its version where known.
	var against []string
	for _, s := range baselines {
		switch {
		case s == "etcd" && m.EtcdVersion != "":
			against = append(against, "etcd "+m.EtcdVersion)
		case s == "etcd37" && m.Etcd37Version != "":
			against = append(against, "etcd "+m.Etcd37Version)
		default:
			against = append(against, map[string]string{"etcd": "etcd", "etcd37": "etcd 3.7", "zk": "ZooKeeper"}[s])
		}
	}
	title := strings.Join(against, ", ")
	if n := len(against); n > 1 {
		title = strings.Join(against[:n-1], ", ") + " and " + against[n-1]
	}
	// The make variables that select these systems (bench/Makefile).
	cmd := "make compare"
	if !etcd37 {
		cmd += " ETCD37=0"
	}
	if zk {
		cmd += " ZK=1"
	}
	if !slices.Contains(c.systems, "dkv-etcd") {
		cmd += " ETCDAPI=0"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# DKV vs %s, %d node(s) on loopback\n\n", title, c.nodes)
	fmt.Fprintf(&b, "Run %s with `%s` (bench/compare). Every cluster on 127.0.0.1, data on the same disk, fsync on, one system at a time; the load generator shares the machine.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), cmd)
	fmt.Fprintf(&b, "- Machine: %s\n", m.summary())
	fmt.Fprintf(&b, "- Disk, 4 KiB write+fdatasync: %s\n", m.Fsync)
	if idle := m.idleLine(); idle != "" {
		b.WriteString("- " + idle + "\n")
	}
	fmt.Fprintf(&b, "- etcd %s (Debian etcd-server), client go.etcd.io/etcd/client/v3\n", m.EtcdVersion)
	if etcd37 {
		fmt.Fprintf(&b, "- etcd-3.7: etcd %s, etcd's own main (go.etcd.io/etcd/server/v3/etcdmain) built by the harness from bench/compare/etcd37 at the version bench/compare's go.mod and go.sum pin (%s); the etcd column's flags, so the same heartbeat, election timeout, fsync and quota; the release's other defaults are its own (it snapshots every 10,000 entries, 3.4 every 100,000)\n", m.Etcd37Version, m.Etcd37Build)
	}
	if zk {
		fmt.Fprintf(&b, "- ZooKeeper %s (Debian zookeeper), client github.com/go-zookeeper/zk %s\n", m.ZKVersion, moduleVersion("github.com/go-zookeeper/zk"))
	}
	fmt.Fprintf(&b, "- Each workload: %s measured, %d keys, %d-byte values, %d gRPC connections spread over the members (etcd: %d clientv3 clients, one member each",
		c.duration, c.keys, c.valueSize, c.conns, c.conns)
	if zk {
		fmt.Fprintf(&b, "; ZooKeeper: %d sessions, one member each", c.conns)
	}
	b.WriteString(")\n")
	b.WriteString("- " + routeNote(c) + "\n\n")
	h := header(c)
	b.WriteString("| " + strings.Join(h, " | ") + " |\n|---|")
	b.WriteString(strings.Repeat("--:|", len(h)-2) + "---|\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r.cells(c), " | ") + " |\n")
	}
	var dkvRatios, apiRatios []string
	for _, r := range ratios(c) {
		if r.num == "dkv" {
			dkvRatios = append(dkvRatios, r.String())
		} else {
			apiRatios = append(apiRatios, r.String())
		}
	}
	fmt.Fprintf(&b, "\n%s: throughput ratio (higher is better for DKV); p99 ratio (lower is better for DKV).", strings.Join(dkvRatios, ", "))
	if zk {
		b.WriteString(" n/a: no fair equivalent (see below).")
	}
	b.WriteString("\n")
	if len(apiRatios) > 0 {
		fmt.Fprintf(&b, "DKV etcd-API: DKV driven through its etcd API (etcdserverpb) by the same clientv3 harness as the etcd columns; %s: its ratios to etcd, one client for both.\n", strings.Join(apiRatios, ", "))
	}
	b.WriteString(cpuTable(c, t))
	fmt.Fprintf(&b, "\n- lock: acquire+release of a random key of %d (uncontended); etcd: one concurrency.Session per client, concurrency.NewMutex Lock+Unlock per op.\n", c.keys)
	fmt.Fprintf(&b, "- watch: %d watchers on one prefix (multiplexed: one stream per connection/clientv3 client), %d writers; ops/s is delivered events/s, p50/p99 the put→event latency (send time embedded in the value).\n", c.watchers, c.watchW)
	fmt.Fprintf(&b, "- lease-keepalive: %d leases shared out among the clients, each client renewing its share over one keep-alive stream; an op is one keep-alive acknowledged.\n", c.leases)
	b.WriteString("- queue: 16 clients, the first 8 enqueue and the other 8 consume; ops/s is jobs consumed per second within the measured time (end to end: enqueue, claim, ack), p50/p99 the enqueue→claim latency (enqueue time embedded in the value). DKV: client/recipe.Queue, Enqueue + Claim + Ack. etcd: its experimental recipe.Queue (go.etcd.io/etcd/client/v3/experimental/recipes), Enqueue + Dequeue; Dequeue deletes the job as it returns it, with no claim or ack, so a job whose consumer dies is lost, where DKV's claim expires and the job is claimed again. Consumers still waiting on an empty queue when the time is up end at their 10 s op timeout (DeadlineExceeded in the errors column).\n")
	b.WriteString("- CPU-ms/1k: CPU time (user+system, /proc/PID/stat) all of a system's server processes spent on the row, per 1,000 successful ops (watch: per 1,000 events delivered); lower is better, and so is the DKV/etcd CPU ratio. It covers the row's setup (sessions, leases, watches), load and cleanup, not the key-space preload, and includes the members' idle work (heartbeats) for the row's time. The load generator's CPU is not in it.\n")
	if zk {
		b.WriteString(zkNotes(c))
	}
	return b.String()
}

// routeNote says how each system's client routes requests over the
// members: DKV's writes go to the leader unless -dkv-route spread.
func routeNote(c config) string {
	if c.dkvRoute == "spread" {
		return "DKV: every connection spread over the members, followers forward writes to the leader (dkv bench --route spread), as clientv3 does; etcd: clientv3, one member per client"
	}
	return "DKV: writes and keep-alive streams to the leader (dkv bench --route leader), as DKV's Go client does; etcd: clientv3, one member per client"
}

// zkNotes says how each row maps onto ZooKeeper.
func zkNotes(c config) string {
	var b strings.Builder
	b.WriteString("\nZooKeeper, row by row:\n\n")
	fmt.Fprintf(&b, "- settings: tickTime 200 ms (the leader pings every 100 ms, etcd's heartbeat), syncLimit 5 (1 s, etcd's election timeout), initLimit 50, forceSync=yes, maxClientCnxns=0, maxSessionTimeout 60 s, heap 1000 MB; client sessions of %s (go-zookeeper drops a request after 2/3 of it). Keys are znodes /bench/<key>.\n", zkSessionTimeout)
	b.WriteString("- put: SetData on znodes created (with a value) before the put and get rows; Create if absent.\n")
	b.WriteString("- get: ZooKeeper reads are sequentially consistent, served from the connected member's state; this row does Sync(path) then GetData, two round trips (go-zookeeper's calls are synchronous, so the two are not pipelined).\n")
	b.WriteString("- get-serializable: a plain GetData.\n")
	b.WriteString("- lock: go-zookeeper's zk.NewLock recipe per op on the same keys (protected ephemeral sequential create + GetChildren, Delete on unlock); the lock znodes' parents exist beforehand; the ephemeral nodes belong to the connections' sessions.\n")
	fmt.Fprintf(&b, "- watch: go-zookeeper %s has no AddWatch (ZooKeeper 3.6's persistent recursive watches), so one-shot watches: each watcher has its own session and a data watch on every one of the %d znodes under the prefix, re-armed by GetW (which also reads the value) when it fires, as a TreeCache does. Latency is put→value read back; a put landing between a notification and its re-arm is seen only as the later value, counted as events not delivered.\n",
		moduleVersion("github.com/go-zookeeper/zk"), c.keys)
	b.WriteString("- lease-keepalive: n/a. ZooKeeper has sessions, not leases: a session lives on the client's pings to its member, with no keep-alive request to time.\n")
	return b.String()
}

// moduleVersion is the version of module path linked into this binary.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

// cpuTable says where the machine's CPU went on each row: the servers'
// and the load generator's CPU time over the row's wall time, in cores.
// On a machine whose cores the servers and the load generator share, a
// row whose total is near the core count is bound by CPU, and its ratio
// is one of CPU cost per op, servers and client together.
func cpuTable(c config, t table) string {
	shown, _ := columns(c)
	var b strings.Builder
	fmt.Fprintf(&b, "\nWhere the machine's %d cores went on each row, in cores (CPU-seconds per second of the row): servers (all members), load generator (the dkv bench process for DKV; this harness's in-process clients for the others), and both.\n\n", runtime.NumCPU())
	b.WriteString("| workload |")
	for _, s := range shown {
		fmt.Fprintf(&b, " %s servers | %s client | %s total |", systemLabels[s], systemLabels[s], systemLabels[s])
	}
	b.WriteString("\n|---|" + strings.Repeat("--:|", 3*len(shown)) + "\n")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "| %s |", r.workload.name)
		for _, s := range shown {
			m := r.bySystem[s]
			if m == nil || m.Server == nil || m.Server.WallSeconds <= 0 {
				b.WriteString(" - | - | - |")
				continue
			}
			w := m.Server.WallSeconds
			fmt.Fprintf(&b, " %.2f | %.2f | %.2f |", m.Server.CPUSeconds/w, m.ClientCPUSeconds/w, (m.Server.CPUSeconds+m.ClientCPUSeconds)/w)
		}
		b.WriteString("\n")
	}
	return b.String()
}
