package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	CPUs        int        `json:"cpus"`
	CPUModel    string     `json:"cpu_model"`
	Kernel      string     `json:"kernel"`
	GoVersion   string     `json:"go_version"`
	DKVCommit   string     `json:"dkv_commit"`
	EtcdVersion string     `json:"etcd_version,omitempty"`
	Fsync       fsyncStats `json:"fsync_4k"`
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
	etcd     *measurement
	dkv      *measurement
}

type table struct {
	rows []row
	text string
}

func renderTable(c config, ms []measurement) table {
	var t table
	for _, name := range c.workloads {
		w, _ := workloadByName(name)
		r := row{workload: w}
		for i := range ms {
			if ms[i].Workload != name {
				continue
			}
			switch ms[i].System {
			case "etcd":
				r.etcd = &ms[i]
			case "dkv":
				r.dkv = &ms[i]
			}
		}
		t.rows = append(t.rows, r)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tclients\tetcd ops/s\tDKV ops/s\tDKV/etcd\tetcd p50\tDKV p50\tetcd p99\tDKV p99\tDKV/etcd p99\terrors\t")
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r.cells(c), "\t")+"\t")
	}
	tw.Flush()
	t.text = b.String()
	return t
}

func (r row) cells(c config) []string {
	clients, _ := r.workload.params(c)
	e, d := r.etcd.result(), r.dkv.result()
	cell := func(res *runner.Result, f func(*runner.Result) string) string {
		if res == nil {
			return "-"
		}
		return f(res)
	}
	// The watch row compares delivered events/s and put→event latency
	// (Result.Extra), not the writers' put ops.
	watch := r.workload.op == "watch"
	rate := func(res *runner.Result) float64 {
		if watch {
			return res.Extra["events_per_sec"]
		}
		return res.OpsPerSec
	}
	lat := func(res *runner.Result, q string) time.Duration {
		if watch {
			return time.Duration(res.Extra["event_"+q+"_ms"] * float64(time.Millisecond))
		}
		if q == "p50" {
			return res.Latency.P50
		}
		return res.Latency.P99
	}
	ops := func(res *runner.Result) string { return fmt.Sprintf("%.0f", rate(res)) }
	p50 := func(res *runner.Result) string { return runner.FormatLatency(lat(res, "p50")) }
	p99 := func(res *runner.Result) string { return runner.FormatLatency(lat(res, "p99")) }
	ratio, p99ratio := "-", "-"
	if e != nil && d != nil && rate(e) > 0 && lat(e, "p99") > 0 {
		ratio = fmt.Sprintf("%.2fx", rate(d)/rate(e))
		p99ratio = fmt.Sprintf("%.2fx", float64(lat(d, "p99"))/float64(lat(e, "p99")))
	}
	var errs []string
	for _, m := range []*measurement{r.etcd, r.dkv} {
		if m == nil {
			continue
		}
		switch {
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
	return []string{r.workload.name, fmt.Sprint(clients), cell(e, ops), cell(d, ops), ratio,
		cell(e, p50), cell(d, p50), cell(e, p99), cell(d, p99), p99ratio, strings.Join(errs, "; ")}
}

func (m *measurement) result() *runner.Result {
	// A run with no successful op has no latency to compare.
	if m == nil || m.Err != "" || m.Result == nil || m.Result.OK == 0 {
		return nil
	}
	return m.Result
}

func renderMarkdown(c config, m machine, t table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# DKV vs etcd, %d node(s) on loopback\n\n", c.nodes)
	fmt.Fprintf(&b, "Run %s with `make compare` (bench/compare). Both clusters on 127.0.0.1, data on the same disk, fsync on, one system at a time; the load generator shares the machine.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: %s\n", m.summary())
	fmt.Fprintf(&b, "- Disk, 4 KiB write+fdatasync: %s\n", m.Fsync)
	fmt.Fprintf(&b, "- etcd %s (Debian etcd-server), client go.etcd.io/etcd/client/v3\n", m.EtcdVersion)
	fmt.Fprintf(&b, "- Each workload: %s measured, %d keys, %d-byte values, %d gRPC connections spread over the members (etcd: %d clientv3 clients, one member each)\n\n",
		c.duration, c.keys, c.valueSize, c.conns, c.conns)
	b.WriteString("| workload | clients | etcd ops/s | DKV ops/s | DKV/etcd | etcd p50 | DKV p50 | etcd p99 | DKV p99 | DKV/etcd p99 | errors |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r.cells(c), " | ") + " |\n")
	}
	b.WriteString("\nDKV/etcd: throughput ratio (higher is better for DKV); p99 ratio (lower is better for DKV).\n")
	fmt.Fprintf(&b, "\n- lock: acquire+release of a random key of %d (uncontended); etcd: one concurrency.Session per client, concurrency.NewMutex Lock+Unlock per op.\n", c.keys)
	fmt.Fprintf(&b, "- watch: %d watchers on one prefix (multiplexed: one stream per connection/clientv3 client), %d writers; ops/s is delivered events/s, p50/p99 the put→event latency (send time embedded in the value).\n", c.watchers, c.watchW)
	fmt.Fprintf(&b, "- lease-keepalive: %d leases shared out among the clients, each client renewing its share over one keep-alive stream; an op is one keep-alive acknowledged.\n", c.leases)
	return b.String()
}
