package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// sysconf(_SC_CLK_TCK), which the kernel fixes at 100 on every
// architecture this harness runs on (x86-64, arm64). golang.org/x/sys/unix
// has no sysconf, and cgo for one constant is not worth it.
const clockTicks = 100

// procCPU is the CPU time a process has used so far, user plus system,
// from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(b)
}

// parseProcStatCPU reads utime and stime (fields 14 and 15, in clock
// ticks) from the contents of /proc/PID/stat. Field 2, comm, is the
// executable's name in parentheses and may itself hold spaces and
// parentheses ("(my (odd) prog)"), so the fields are counted from the last
// ')' in the line, after which the kernel writes only numbers and the
// one-letter state.
func parseProcStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || bytes.IndexByte(b, '(') < 0 {
		return 0, fmt.Errorf("/proc stat: no (comm) in %q", b)
	}
	// rest[0] is field 3 (state), so field n is rest[n-3].
	rest := strings.Fields(string(b[i+1:]))
	const utime, stime = 14 - 3, 15 - 3
	if len(rest) <= stime {
		return 0, fmt.Errorf("/proc stat: %d fields after comm, want more than %d", len(rest), stime)
	}
	var ticks int64
	for _, f := range []string{rest[utime], rest[stime]} {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc stat: bad cpu time %q", f)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procRSS is a process's resident set size in bytes, from VmRSS in
// /proc/PID/status.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseStatusRSS(b)
}

// parseStatusRSS reads the "VmRSS:   1234 kB" line of /proc/PID/status.
func parseStatusRSS(b []byte) (int64, error) {
	for _, l := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(l, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc status: odd VmRSS line %q", l)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc status: %q: %w", l, err)
		}
		return n * 1024, nil
	}
	return 0, fmt.Errorf("/proc status: no VmRSS line")
}

// cpuTime is the CPU time all of the cluster's members have used so far.
func (c *cluster) cpuTime() (time.Duration, error) {
	var total time.Duration
	for _, p := range c.procs {
		d, err := procCPU(p.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		total += d
	}
	return total, nil
}

// rss is the sum of the members' resident set sizes.
func (c *cluster) rss() (int64, error) {
	var total int64
	for _, p := range c.procs {
		n, err := procRSS(p.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		total += n
	}
	return total, nil
}

// serverUsage is what the servers spent on one row, measured from /proc
// around the row's load (not its preload): CPU time of all members, and
// their summed RSS before and at its highest during the row.
type serverUsage struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	// WallSeconds is the time between the two CPU readings.
	WallSeconds float64 `json:"wall_seconds"`
	RSSBefore   int64   `json:"rss_before_bytes"`
	RSSPeak     int64   `json:"rss_peak_bytes"`
}

// idleWorkload names the measurement of a cluster with no load.
const idleWorkload = "idle"

// measureIdle is the servers' usage over d with no load, taken once a
// cluster is ready, before its first row; nil when d is 0.
func measureIdle(ctx context.Context, cl *cluster, sys string, d time.Duration) []measurement {
	if d <= 0 {
		return nil
	}
	m := startMeter(cl)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	u := m.stop()
	if u == nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "%s idle: %.1f CPU-ms per second over %s\n", sys, u.CPUSeconds*1e3/u.WallSeconds, d)
	return []measurement{{Workload: idleWorkload, System: sys, Server: u}}
}

// meter samples a cluster's members around one row: CPU at start and
// stop, RSS at start and every 100ms until stop, keeping the peak.
type meter struct {
	cl    *cluster
	t0    time.Time
	cpu0  time.Duration
	rss0  int64
	peak  chan int64
	quit  chan struct{}
	start error
}

func startMeter(cl *cluster) *meter {
	m := &meter{cl: cl, t0: time.Now(), peak: make(chan int64, 1), quit: make(chan struct{})}
	if m.cpu0, m.start = cl.cpuTime(); m.start != nil {
		return m
	}
	if m.rss0, m.start = cl.rss(); m.start != nil {
		return m
	}
	go func() {
		peak := m.rss0
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.quit:
				if n, err := cl.rss(); err == nil {
					peak = max(peak, n)
				}
				m.peak <- peak
				return
			case <-t.C:
				if n, err := cl.rss(); err == nil {
					peak = max(peak, n)
				}
			}
		}
	}()
	return m
}

// stop ends the sampling and returns the usage, or nil if /proc could not
// be read (the row then shows no CPU figure).
func (m *meter) stop() *serverUsage {
	if m.start != nil {
		fmt.Fprintf(os.Stderr, "server usage: %v\n", m.start)
		return nil
	}
	close(m.quit)
	peak := <-m.peak
	cpu1, err := m.cl.cpuTime()
	if err != nil {
		fmt.Fprintf(os.Stderr, "server usage: %v\n", err)
		return nil
	}
	return &serverUsage{
		CPUSeconds:  (cpu1 - m.cpu0).Seconds(),
		WallSeconds: time.Since(m.t0).Seconds(),
		RSSBefore:   m.rss0,
		RSSPeak:     peak,
	}
}

// selfCPU is the CPU time (user+system) this process has used so far: the
// in-process load generators' share of the machine.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
