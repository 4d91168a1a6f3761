package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

// A scaling curve runs one workload at several loads (clients, or
// watchers) on etcd and DKV in the same run, one point after another on
// the same cluster as the table, and plots throughput, p99 and server CPU
// per op against the load. -curves selects them; each point runs for
// -curve-duration.
type curveDef struct {
	name string
	desc string
	op   string
	// watchers: x is the number of watchers on one prefix (the watch
	// workload with -watch-writers writers), not clients.
	watchers bool
	// valueSize replaces -value-size; large curves use -curve-large-keys
	// keys under their own prefix, so their values never mix with the
	// 256-byte ones (a preload skips a key space that is already full).
	valueSize int
	large     bool
	// big: the key space is -bigkeys keys under their own prefix (data
	// well beyond the block cache at the default); its table adds p50.
	big bool
}

const (
	largePrefix = "bench64k/"
	bigPrefix   = "benchbig/"
)

var curveTable = []curveDef{
	{name: "put", desc: "put, random keys", op: "put"},
	{name: "get", desc: "linearizable get", op: "get"},
	{name: "mixed", desc: "90% linearizable get, 10% put", op: "mixed"},
	{name: "put-64k", desc: "put, 64 KiB values", op: "put", valueSize: 64 << 10, large: true},
	{name: "get-64k", desc: "linearizable get, 64 KiB values", op: "get", valueSize: 64 << 10, large: true},
	{name: "get-big", desc: "linearizable get, -bigkeys keys", op: "get", big: true},
	{name: "watchers", desc: "watchers on one prefix; events/s delivered, put→event p99 and server memory per watcher", op: "watch", watchers: true},
}

func curveNames() []string {
	var n []string
	for _, d := range curveTable {
		n = append(n, d.name)
	}
	return n
}

func curveByName(name string) (curveDef, bool) {
	for _, d := range curveTable {
		if d.name == name {
			return d, true
		}
	}
	return curveDef{}, false
}

func (d curveDef) xs(c config) []int {
	if d.watchers {
		return c.curveWatchers
	}
	return c.curveClients
}

func (d curveDef) xLabel() string {
	if d.watchers {
		return "watchers"
	}
	return "clients"
}

// curvePoints is every point of the selected curves, as workloads.
func (c config) curvePoints() []workload {
	var out []workload
	for _, name := range c.curves {
		d, _ := curveByName(name)
		for _, x := range d.xs(c) {
			w := workload{
				name:      fmt.Sprintf("%s@%d", d.name, x),
				desc:      d.desc,
				op:        d.op,
				curve:     d.name,
				x:         x,
				valueSize: d.valueSize,
				duration:  c.curveDuration,
			}
			if d.watchers {
				w.watchers = x
			} else {
				w.clients = x
			}
			if d.large {
				w.keySpace, w.prefix = c.curveLargeKeys, largePrefix
			}
			if d.big {
				w.keySpace, w.prefix = c.bigKeys, bigPrefix
			}
			out = append(out, w)
		}
	}
	return out
}

// rate is what a row's ops/s column shows: delivered events/s for a
// watch row, jobs acked (dequeued) per second within the measured
// duration for a queue row, successful ops/s otherwise.
func rate(res *runner.Result) float64 {
	switch res.Workload {
	case "watch":
		return res.Extra["events_per_sec"]
	case "queue":
		return res.Extra["jobs_per_s"]
	}
	return res.OpsPerSec
}

// lat is a row's latency quantile q ("p50", "p99"): put→event for a watch
// row, enqueue→claim for a queue row, the ops' otherwise.
func lat(res *runner.Result, q string) time.Duration {
	switch res.Workload {
	case "watch":
		return time.Duration(res.Extra["event_"+q+"_ms"] * float64(time.Millisecond))
	case "queue":
		return time.Duration(res.Extra["claim_latency_"+q+"_ms"] * float64(time.Millisecond))
	}
	if q == "p50" {
		return res.Latency.P50
	}
	return res.Latency.P99
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// curveSystems are the systems curves run on, in column order.
var curveSystems = []string{"etcd", "dkv"}

// point finds system sys's measurement of curve d at x.
func point(ms []measurement, d curveDef, sys string, x int) *measurement {
	for i := range ms {
		if ms[i].Curve == d.name && ms[i].System == sys && ms[i].X == x {
			return &ms[i]
		}
	}
	return nil
}

// metric is one panel of a curve's plot and one column group of its table.
type metric struct {
	label string // axis label
	short string // table column
	value func(m *measurement, x int) (float64, bool)
}

func curveMetrics(d curveDef) []metric {
	rateLabel, latLabel := "ops/s", "p99 latency (ms)"
	if d.watchers {
		rateLabel, latLabel = "events/s delivered", "put→event p99 (ms)"
	}
	ms := []metric{
		{label: rateLabel, short: rateLabel, value: func(m *measurement, _ int) (float64, bool) {
			if res := m.result(); res != nil {
				return rate(res), true
			}
			return 0, false
		}},
		{label: latLabel, short: "p99 ms", value: func(m *measurement, _ int) (float64, bool) {
			if res := m.result(); res != nil && lat(res, "p99") > 0 {
				return msOf(lat(res, "p99")), true
			}
			return 0, false
		}},
		{label: "server CPU-ms per 1,000 " + map[bool]string{false: "ops", true: "events"}[d.watchers], short: "CPU-ms/1k", value: func(m *measurement, _ int) (float64, bool) {
			return m.cpuPer1k()
		}},
	}
	if d.big {
		p50 := metric{label: "p50 latency (ms)", short: "p50 ms", value: func(m *measurement, _ int) (float64, bool) {
			if res := m.result(); res != nil && lat(res, "p50") > 0 {
				return msOf(lat(res, "p50")), true
			}
			return 0, false
		}}
		ms = append(ms[:1], append([]metric{p50}, ms[1:]...)...)
	}
	if d.watchers {
		ms = append(ms, metric{label: "server RSS growth per watcher (KiB)", short: "KiB/watcher", value: func(m *measurement, x int) (float64, bool) {
			v, ok := m.rssPerWatcher(x)
			return v / 1024, ok
		}})
	}
	return ms
}

// writeCurves writes, under dir, one PNG per curve (<curve>.png: a panel
// per metric, a line per system), curves.csv with every point, and
// curves.md with a table per curve that links its plot.
func writeCurves(c config, mach machine, dir string, ms []measurement) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# Scaling curves, DKV vs etcd, %d node(s) on loopback\n\n", c.nodes)
	fmt.Fprintf(&md, "Run %s by bench/compare (`make compare CURVES=...`): each point %s measured, one system at a time on the clusters of the same run, %d gRPC connections at most (fewer clients: one each), %d-byte values unless the curve says otherwise, %d keys (64 KiB curves: %d keys under %s; get-big: %d keys under %s). Watchers curve: %d writers.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), c.curveDuration, c.conns, c.valueSize, c.keys, c.curveLargeKeys, largePrefix, c.bigKeys, bigPrefix, c.watchW)
	fmt.Fprintf(&md, "- Machine: %s\n- Disk, 4 KiB write+fdatasync: %s\n- etcd %s\n", mach.summary(), mach.Fsync, mach.EtcdVersion)
	if idle := mach.idleLine(); idle != "" {
		md.WriteString("- " + idle + "\n")
	}
	md.WriteString("\n")
	md.WriteString("Server CPU is the CPU time (user+system, /proc/PID/stat) of all of a system's members during the point, per 1,000 successful ops (watchers: events delivered). Memory per watcher is the growth of the members' summed RSS (/proc/PID/status VmRSS, sampled every 100 ms) from before the point to its peak, divided by the watchers: rough, since it counts whatever else grew.\n")

	f, err := os.Create(filepath.Join(dir, "curves.csv"))
	if err != nil {
		return err
	}
	defer f.Close()
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"curve", "x_is", "x", "system", "rate_is", "rate", "p50_ms", "p99_ms", "server_cpu_ms_per_1k", "server_cpu_seconds", "rss_before_bytes", "rss_peak_bytes", "errors", "failed"})

	for _, name := range c.curves {
		d, _ := curveByName(name)
		metrics := curveMetrics(d)
		for _, x := range d.xs(c) {
			for _, sys := range curveSystems {
				m := point(ms, d, sys, x)
				if m == nil {
					continue
				}
				_ = cw.Write(csvRow(d, m, x)) // cw.Error, below, reports a failed write
			}
		}
		png := d.name + ".png"
		if err := plotCurve(filepath.Join(dir, png), d, c, ms, metrics); err != nil {
			return fmt.Errorf("plot %s: %w", d.name, err)
		}
		fmt.Fprintf(&md, "\n## %s: %s\n\n![%s](%s)\n\n", d.name, d.desc, d.name, png)
		md.WriteString(curveMarkdown(d, c, ms, metrics))
	}
	if r := restartMarkdown(c, ms); r != "" {
		md.WriteString("\n" + r)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "curves.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	var pts []measurement
	for _, m := range ms {
		if m.Curve != "" || m.Workload == idleWorkload {
			pts = append(pts, m)
		}
	}
	if err := writeJSON(filepath.Join(dir, "curves.json"), mach, pts); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote curves.csv, curves.md, curves.json and %d plots under %s\n", len(c.curves), dir)
	return nil
}

func csvRow(d curveDef, m *measurement, x int) []string {
	row := []string{d.name, d.xLabel(), strconv.Itoa(x), m.System}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	res := m.result()
	if res == nil {
		row = append(row, make([]string, 9)...) // rate_is .. errors
	} else {
		unit := "ops_per_sec"
		if res.Workload == "watch" {
			unit = "events_per_sec"
		}
		row = append(row, unit, f(rate(res)), f(msOf(lat(res, "p50"))), f(msOf(lat(res, "p99"))))
		if cpu, ok := m.cpuPer1k(); ok {
			row = append(row, f(cpu), f(m.Server.CPUSeconds), strconv.FormatInt(m.Server.RSSBefore, 10), strconv.FormatInt(m.Server.RSSPeak, 10))
		} else {
			row = append(row, "", "", "", "")
		}
		row = append(row, strconv.FormatInt(res.ErrorCount(), 10))
	}
	failed := ""
	switch {
	case m.Err != "":
		failed = m.Err
	case m.NA != "":
		failed = "n/a: " + m.NA
	}
	return append(row, failed)
}

// curveMarkdown is the markdown table of one curve: a row per x, per metric
// each system's value and DKV/etcd.
func curveMarkdown(d curveDef, c config, ms []measurement, metrics []metric) string {
	var b strings.Builder
	h := []string{d.xLabel()}
	for _, mt := range metrics {
		for _, sys := range curveSystems {
			h = append(h, systemLabels[sys]+" "+mt.short)
		}
		h = append(h, "DKV/etcd")
	}
	h = append(h, "errors")
	b.WriteString("| " + strings.Join(h, " | ") + " |\n|")
	b.WriteString(strings.Repeat("--:|", len(h)-1) + "---|\n")
	for _, x := range d.xs(c) {
		row := []string{strconv.Itoa(x)}
		for _, mt := range metrics {
			var vals [2]float64
			var oks [2]bool
			for i, sys := range curveSystems {
				if m := point(ms, d, sys, x); m != nil {
					vals[i], oks[i] = mt.value(m, x)
				}
				row = append(row, formatValue(vals[i], oks[i]))
			}
			if oks[0] && oks[1] && vals[0] > 0 {
				row = append(row, fmt.Sprintf("%.2fx", vals[1]/vals[0]))
			} else {
				row = append(row, "-")
			}
		}
		var errs []string
		for _, sys := range curveSystems {
			m := point(ms, d, sys, x)
			switch {
			case m == nil:
			case m.Err != "":
				errs = append(errs, systemLabels[sys]+": FAILED")
			case m.Result != nil && m.Result.ErrorCount() > 0:
				errs = append(errs, fmt.Sprintf("%s: %d", systemLabels[sys], m.Result.ErrorCount()))
			}
		}
		if len(errs) == 0 {
			errs = []string{"0"}
		}
		row = append(row, strings.Join(errs, "; "))
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

func formatValue(v float64, ok bool) string {
	switch {
	case !ok:
		return "-"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// systemColors keeps each system's color the same on every plot.
var systemColors = map[string]color.Color{"etcd": plotutil.Color(1), "dkv": plotutil.Color(0)}

// plotCurve draws one panel per metric side by side, x on a log2 axis
// with a tick at each point, a line per system, and writes a PNG.
func plotCurve(path string, d curveDef, c config, ms []measurement, metrics []metric) error {
	xs := d.xs(c)
	var ticks []plot.Tick
	for _, x := range xs {
		ticks = append(ticks, plot.Tick{Value: float64(x), Label: strconv.Itoa(x)})
	}
	row := make([]*plot.Plot, len(metrics))
	for i, mt := range metrics {
		p := plot.New()
		p.Title.Text = mt.label
		p.X.Label.Text = d.xLabel()
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		// The x range is the curve's, fixed: a panel whose points all
		// failed still has a valid log axis (gonum panics on 0).
		p.X.Min, p.X.Max = float64(slices.Min(xs)), float64(slices.Max(xs))
		if p.X.Max <= p.X.Min {
			p.X.Max = 2 * p.X.Min
		}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		top := 0.0
		for j, sys := range curveSystems {
			var pts plotter.XYs
			for _, x := range xs {
				m := point(ms, d, sys, x)
				if m == nil {
					continue
				}
				if v, ok := mt.value(m, x); ok {
					pts = append(pts, plotter.XY{X: float64(x), Y: v})
					top = max(top, v)
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			l.Color, s.Color = systemColors[sys], systemColors[sys]
			s.Shape = plotutil.Shape(j)
			p.Add(l, s)
			p.Legend.Add(systemLabels[sys], l, s)
		}
		// From 0, with headroom above the highest point for the legend.
		p.Y.Min = 0
		if top > 0 {
			p.Y.Max = top * 1.3
		}
		row[i] = p
	}
	img := vgimg.New(vg.Length(len(metrics))*4*vg.Inch, 3.2*vg.Inch)
	dc := draw.New(img)
	// A title line above the panels.
	title := fmt.Sprintf("%s: %s (%d nodes, %s per point)", d.name, d.desc, c.nodes, c.curveDuration)
	if d.valueSize == 0 && !d.watchers {
		title = fmt.Sprintf("%s: %s, %d-byte values (%d nodes, %s per point)", d.name, d.desc, c.valueSize, c.nodes, c.curveDuration)
	}
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 12), XAlign: text.XCenter, YAlign: text.YTop, Handler: plot.DefaultTextHandler}
	dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Max.Y - vg.Points(4)}, title)
	tiles := draw.Tiles{Rows: 1, Cols: len(metrics), PadTop: vg.Points(30), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadX: vg.Points(16)}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
