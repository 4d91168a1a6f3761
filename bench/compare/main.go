// Command compare runs the same workloads against a DKV cluster, an etcd
// cluster (Debian's 3.4 and, built from this module's pinned
// go.etcd.io/etcd/server/v3, etcd's newest release) and, opt-in, a
// ZooKeeper ensemble started side by side on loopback (same machine, same
// disk, fsync on for all, one system at a time) and prints one table:
// workload × system with ops/s, p50, p99 and the DKV/etcd (and DKV/ZK)
// ratios. See README.md.
//
// Every system is measured by the same load loop and histogram
// (github.com/dkv-io/dkv/internal/bench/runner): DKV through `dkv bench -o
// json` run as a subprocess, etcd and ZooKeeper in this process through
// their own Go clients (go.etcd.io/etcd/client/v3,
// github.com/go-zookeeper/zk) with identical parameters. The DKV side is a
// subprocess because DKV's and etcd's generated protobuf code both
// register a file named "kv.proto", and linking both into one binary
// panics at init.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

type config struct {
	nodes      int
	duration   time.Duration
	clients    int
	conns      int
	dkvRoute   string // dkv bench --route; "": its default (leader)
	keys       int
	valueSize  int
	workloads  []string
	systems    []string
	dir        string
	keep       bool
	out        string
	jsonOut    string
	dkvBin     string
	etcdBin    string
	etcd37Bin  string
	zkClass    string
	repo       string
	noInstall  bool
	fsyncCount int
	watchers   int
	watchW     int
	leases     int
	idle       time.Duration
	// prefix is the key prefix of put, get and mixed (keyPrefix unless a
	// curve gives its own key space); readRatio is mixed's share of reads.
	prefix    string
	readRatio float64

	curves         []string
	curveClients   []int
	curveWatchers  []int
	curveDuration  time.Duration
	curveLargeKeys int
	bigKeys        int
	restart        bool
	curveDir       string
}

func main() {
	var c config
	var workloads, systems, curves, curveClients, curveWatchers string
	flag.IntVar(&c.nodes, "nodes", 3, "cluster size for both systems (1 or 3)")
	flag.DurationVar(&c.duration, "duration", 15*time.Second, "measured time per workload and system")
	flag.IntVar(&c.clients, "clients", 64, "concurrent clients for the multi-client workloads")
	flag.IntVar(&c.conns, "conns", 8, "gRPC connections the clients share, spread over the nodes")
	flag.IntVar(&c.keys, "keys", 10000, "key space size")
	flag.StringVar(&c.dkvRoute, "dkv-route", "", "DKV: dkv bench --route, leader or spread (default: dkv bench's own, leader: writes and keep-alive streams to the leader as DKV's Go client does; spread: every connection spread, followers forward writes, as clientv3 does)")
	flag.IntVar(&c.valueSize, "value-size", 256, "value size in bytes")
	flag.StringVar(&workloads, "workloads", strings.Join(defaultWorkloadNames(), ","), "comma-separated workloads to run, in order")
	flag.StringVar(&systems, "systems", "etcd,dkv", "comma-separated systems to run, in order: etcd, etcd37, zk, dkv, dkv-etcd (etcd37 is etcd 3.7 built from this module's go.mod, started like etcd; make compare passes etcd,etcd37,dkv,dkv-etcd; zk is opt-in, make compare ZK=1; dkv-etcd is DKV driven through its etcd API by the clientv3 harness etcd runs with)")
	flag.StringVar(&c.dir, "dir", "", "parent of the temporary data directories (default: the system temp dir; keep it on the disk you mean to measure)")
	flag.BoolVar(&c.keep, "keep", false, "keep the data directories and logs")
	flag.StringVar(&c.out, "out", "compare-results.md", "markdown file for the table")
	flag.StringVar(&c.jsonOut, "json", "", "also write every raw result as JSON here")
	flag.StringVar(&c.dkvBin, "dkv", "", "dkv binary to use (default: build ./cmd/dkv of the repository)")
	flag.StringVar(&c.etcdBin, "etcd", "", "etcd binary (default: etcd on PATH, installed with apt-get if missing)")
	flag.StringVar(&c.etcd37Bin, "etcd37", "", "etcd37: the etcd 3.7 binary (default: go build ./etcd37 of this module, etcd's own main at the go.etcd.io/etcd/server/v3 version go.mod pins)")
	flag.StringVar(&c.zkClass, "zookeeper", "", "ZooKeeper server classpath (default: Debian's "+zkDebianClasspath+", installed with apt-get if missing)")
	flag.StringVar(&c.repo, "repo", "", "DKV repository root (default: found from the working directory)")
	flag.BoolVar(&c.noInstall, "no-install", false, "fail instead of installing etcd or ZooKeeper with apt-get")
	flag.IntVar(&c.watchers, "watchers", 100, "watch: watches on the prefix")
	flag.IntVar(&c.watchW, "watch-writers", 8, "watch: concurrent writers putting to the watched prefix")
	flag.IntVar(&c.leases, "leases", 1000, "lease-keepalive: leases kept alive (shared out among the clients)")
	flag.DurationVar(&c.idle, "idle", 2*time.Second, "how long to measure each cluster's server CPU with no load, before its first row (0: not at all)")
	flag.IntVar(&c.fsyncCount, "fsync-samples", 200, "4 KiB write+fdatasync samples for the disk latency line")
	flag.StringVar(&curves, "curves", "", "comma-separated scaling curves to run after the table, etcd and DKV only, or all: "+strings.Join(curveNames(), ", "))
	flag.StringVar(&curveClients, "curve-clients", "1,4,16,64,256", "curves: client counts of the client curves")
	flag.StringVar(&curveWatchers, "curve-watchers", "100,1000,10000", "curves: watcher counts of the watchers curve")
	flag.DurationVar(&c.curveDuration, "curve-duration", 5*time.Second, "curves: measured time per point and system")
	flag.IntVar(&c.curveLargeKeys, "curve-large-keys", 1000, "curves: key space of the 64 KiB value curves (each system preloads it: keys × 64 KiB × members on disk)")
	flag.IntVar(&c.bigKeys, "bigkeys", 1_000_000, "curves: key space of the get-big curve (each system preloads it in batched txns)")
	flag.BoolVar(&c.restart, "restart", false, "etcd and DKV: after the rows and curves, preload -bigkeys keys (if not there) and time one member's restart, from process start to serving a linearizable get; written to curves.md")
	flag.StringVar(&c.curveDir, "curve-dir", "", "curves: directory for the PNG plots, curves.csv and curves.md (default: docs/bench of the repository)")
	flag.Parse()
	c.prefix, c.readRatio = keyPrefix, 0.9
	if workloads != "none" {
		c.workloads = splitList(workloads)
	}
	c.systems = splitList(systems)
	c.curves = splitList(curves)
	if len(c.curves) == 1 && c.curves[0] == "all" {
		c.curves = curveNames()
	}
	var err error
	if c.curveClients, err = splitInts(curveClients); err == nil {
		c.curveWatchers, err = splitInts(curveWatchers)
	}
	if err == nil {
		err = c.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func (c *config) validate() error {
	if c.bigKeys < 1 {
		return errors.New("-bigkeys must be positive")
	}
	if c.nodes != 1 && c.nodes != 3 && c.nodes != 5 {
		return fmt.Errorf("-nodes must be 1, 3 or 5, got %d", c.nodes)
	}
	if c.dkvRoute != "" && c.dkvRoute != "leader" && c.dkvRoute != "spread" {
		return fmt.Errorf("-dkv-route must be leader or spread, got %q", c.dkvRoute)
	}
	if c.duration <= 0 || c.clients < 1 || c.conns < 1 || c.keys < 1 || c.valueSize < 0 || c.watchers < 1 || c.watchW < 1 || c.leases < 1 {
		return errors.New("-duration, -clients, -conns, -keys, -watchers, -watch-writers and -leases must be positive")
	}
	for _, w := range c.workloads {
		if _, ok := workloadByName(w); !ok {
			return fmt.Errorf("unknown workload %q (have %v)", w, defaultWorkloadNames())
		}
	}
	for _, s := range c.systems {
		if _, ok := systemLabels[s]; !ok {
			return fmt.Errorf("unknown system %q (etcd, etcd37, zk, dkv, dkv-etcd)", s)
		}
	}
	for _, n := range c.curves {
		if _, ok := curveByName(n); !ok {
			return fmt.Errorf("unknown curve %q (have all, %s)", n, strings.Join(curveNames(), ", "))
		}
	}
	if len(c.curves) > 0 && (c.curveDuration <= 0 || c.curveLargeKeys < 1 || len(c.curveClients) == 0 || len(c.curveWatchers) == 0) {
		return errors.New("-curve-duration, -curve-large-keys, -curve-clients and -curve-watchers must be positive")
	}
	if len(c.workloads) == 0 && len(c.curves) == 0 {
		return errors.New("nothing to run: -workloads none and no -curves")
	}
	return nil
}

// splitInts parses a comma-separated list of positive integers.
func splitInts(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// systemLabels names each system's column.
var systemLabels = map[string]string{"etcd": "etcd", "etcd37": "etcd-3.7", "zk": "ZK", "dkv": "DKV", "dkv-etcd": "DKV etcd-API"}

// workload is one row of the table; every system runs it with the same
// parameters.
type workload struct {
	name         string
	desc         string
	op           string // put, get, lock, watch, lease-keepalive, queue: the dkv bench workload
	clients      int    // 0: -clients
	conns        int    // 0: -conns
	serializable bool

	// Set on the points of a scaling curve (curves.go): the curve and the
	// point's x (clients, or watchers for the watchers curve), and what
	// the curve changes from the flags' defaults (0 or "": the flag).
	curve     string
	x         int
	valueSize int
	keySpace  int
	prefix    string
	watchers  int
	duration  time.Duration
}

// apply is c as this workload runs it: the curve's value size, key
// space, prefix, watchers and duration in place of the flags'.
func (w workload) apply(c config) config {
	if w.valueSize > 0 {
		c.valueSize = w.valueSize
	}
	if w.keySpace > 0 {
		c.keys = w.keySpace
	}
	if w.prefix != "" {
		c.prefix = w.prefix
	}
	if w.watchers > 0 {
		c.watchers = w.watchers
	}
	if w.duration > 0 {
		c.duration = w.duration
	}
	return c
}

// keys is the workload's key space: for lease-keepalive, the number of
// leases.
func (w workload) keys(c config) int {
	if w.op == "lease-keepalive" {
		return c.leases
	}
	return c.keys
}

var workloadTable = []workload{
	{name: "put", desc: "put, random keys", op: "put"},
	{name: "get", desc: "linearizable get", op: "get"},
	{name: "get-serializable", desc: "serializable get", op: "get", serializable: true},
	{name: "put-1client", desc: "put, 1 client (latency)", op: "put", clients: 1, conns: 1},
	{name: "lock", desc: "lock acquire+release, random keys (uncontended)", op: "lock"},
	{name: "watch", desc: "prefix watchers; events/s and put→event latency", op: "watch"},
	{name: "lease-keepalive", desc: "keep-alives over one stream per client", op: "lease-keepalive"},
	{name: "queue", desc: "job queue, 8 producers + 8 consumers: jobs/s end to end, enqueue→claim latency", op: "queue", clients: 16},
}

// jobs is what system sys runs, in order: the table's workloads, then,
// for etcd and DKV, every point of the selected curves.
func (c config) jobs(sys string) []workload {
	var out []workload
	for _, name := range c.workloads {
		w, _ := workloadByName(name)
		out = append(out, w)
	}
	if sys == "etcd" || sys == "dkv" {
		out = append(out, c.curvePoints()...)
	}
	return out
}

func defaultWorkloadNames() []string {
	var n []string
	for _, w := range workloadTable {
		n = append(n, w.name)
	}
	return n
}

func workloadByName(name string) (workload, bool) {
	for _, w := range workloadTable {
		if w.name == name {
			return w, true
		}
	}
	return workload{}, false
}

func (w workload) params(c config) (clients, conns int) {
	clients, conns = w.clients, w.conns
	if w.op == "watch" {
		clients = c.watchW
	}
	if clients == 0 {
		clients = c.clients
	}
	if conns == 0 {
		conns = c.conns
	}
	return clients, min(conns, clients)
}

// measurement is one system's cells of a row. NA says why the system has
// no fair equivalent of the workload: the table shows n/a, never a number.
// Server is what the system's server processes spent on it (procstat.go).
type measurement struct {
	Workload string         `json:"workload"`
	Curve    string         `json:"curve,omitempty"`
	X        int            `json:"x,omitempty"`
	System   string         `json:"system"`
	Result   *runner.Result `json:"result,omitempty"`
	Server   *serverUsage   `json:"server,omitempty"`
	// ClientCPUSeconds is the CPU time (user+system) the load generator
	// spent on the row: the dkv bench process for DKV, this process for
	// the in-process clients (etcd, DKV's etcd API, ZooKeeper).
	ClientCPUSeconds float64 `json:"client_cpu_seconds,omitempty"`
	Err              string  `json:"error,omitempty"`
	NA               string  `json:"not_applicable,omitempty"`
}

func run(ctx context.Context, c config) error {
	repo := c.repo
	if repo == "" {
		var err error
		if repo, err = findRepo(); err != nil {
			return err
		}
	}
	base, err := os.MkdirTemp(c.dir, "dkv-compare-")
	if err != nil {
		return err
	}
	if c.keep {
		fmt.Fprintf(os.Stderr, "keeping data and logs in %s\n", base)
	} else {
		defer os.RemoveAll(base)
	}

	m := machineInfo(repo)
	fmt.Fprintf(os.Stderr, "machine: %s\n", m.summary())
	m.Fsync, err = fsyncLatency(base, c.fsyncCount)
	if err != nil {
		return fmt.Errorf("fsync probe: %w", err)
	}
	fmt.Fprintf(os.Stderr, "disk: 4 KiB write+fdatasync %s\n", m.Fsync)

	var results []measurement
	for _, sys := range c.systems {
		var rs []measurement
		switch sys {
		case "etcd":
			etcdBin, err := ensureEtcd(ctx, c)
			if err != nil {
				return err
			}
			m.EtcdVersion = etcdVersion(etcdBin)
			rs, err = runEtcd(ctx, c, "etcd", etcdBin, filepath.Join(base, "etcd"), c.restart)
			if err != nil {
				return fmt.Errorf("etcd: %w", err)
			}
		case "etcd37":
			bin := c.etcd37Bin
			if bin == "" {
				if bin, err = buildEtcd37(ctx, repo, base); err != nil {
					return err
				}
			}
			m.Etcd37Version, m.Etcd37Build = etcdVersion(bin), etcdBuild(bin)
			// Table rows only: the curves and the restart row stay
			// Debian's etcd against DKV.
			rs, err = runEtcd(ctx, c, "etcd37", bin, filepath.Join(base, "etcd37"), false)
			if err != nil {
				return fmt.Errorf("etcd37: %w", err)
			}
		case "zk":
			java, classpath, err := ensureZooKeeper(ctx, c)
			if err != nil {
				return err
			}
			m.ZKVersion = zkVersion()
			rs, err = runZooKeeper(ctx, c, java, classpath, filepath.Join(base, "zk"))
			if err != nil {
				return fmt.Errorf("zk: %w", err)
			}
		case "dkv":
			dkvBin := c.dkvBin
			if dkvBin == "" {
				if dkvBin, err = buildDKV(ctx, repo, base); err != nil {
					return err
				}
				c.dkvBin = dkvBin // one build for dkv and dkv-etcd
			}
			rs, err = runDKV(ctx, c, dkvBin, filepath.Join(base, "dkv"))
			if err != nil {
				return fmt.Errorf("dkv: %w", err)
			}
		case "dkv-etcd":
			dkvBin := c.dkvBin
			if dkvBin == "" {
				if dkvBin, err = buildDKV(ctx, repo, base); err != nil {
					return err
				}
				c.dkvBin = dkvBin // one build for dkv and dkv-etcd
			}
			rs, err = runDKVEtcd(ctx, c, dkvBin, filepath.Join(base, "dkv-etcd"))
			if err != nil {
				return fmt.Errorf("dkv-etcd: %w", err)
			}
		}
		results = append(results, rs...)
		for _, r := range rs {
			if r.Workload == idleWorkload && r.Server != nil && r.Server.WallSeconds > 0 {
				if m.IdleCPU == nil {
					m.IdleCPU = map[string]float64{}
				}
				m.IdleCPU[sys] = r.Server.CPUSeconds * 1e3 / r.Server.WallSeconds
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	if len(c.workloads) > 0 {
		if err := writeTable(c, m, results); err != nil {
			return err
		}
	} else {
		// Curves only: leave the last table's files as they are.
		fmt.Fprintf(os.Stderr, "\nno table rows (-workloads none): %s and -json not written\n", c.out)
	}
	if len(c.curves) > 0 || c.restart {
		dir := c.curveDir
		if dir == "" {
			dir = filepath.Join(repo, "docs", "bench")
		}
		if err := writeCurves(c, m, dir, results); err != nil {
			return fmt.Errorf("curves: %w", err)
		}
	}
	return nil
}

// writeTable prints the table and writes it to -out, and every result to
// -json.
func writeTable(c config, m machine, results []measurement) error {
	table := renderTable(c, results)
	fmt.Println()
	fmt.Print(table.text)
	md := renderMarkdown(c, m, table)
	if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\nwrote %s\n", c.out)
	if c.jsonOut != "" {
		if err := writeJSON(c.jsonOut, m, results); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", c.jsonOut)
	}
	return nil
}

func writeJSON(path string, m machine, results []measurement) error {
	b, err := json.MarshalIndent(struct {
		Machine machine       `json:"machine"`
		Results []measurement `json:"results"`
	}{m, results}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// findRepo walks up from the working directory to the directory whose
// go.mod declares module github.com/dkv-io/dkv.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module github.com/dkv-io/dkv\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the DKV repository (go.mod of github.com/dkv-io/dkv) above the working directory; pass -repo")
		}
		dir = parent
	}
}
