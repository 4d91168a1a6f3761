package etcdcompat

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestEtcdctlCheckDatascale: `etcdctl check datascale` writes 10,000
// 1 KiB keys through the cluster and reads the members' memory from
// /metrics on their client URLs (process_resident_memory_bytes), which
// is where etcd serves it; it passes on the target as on etcd.
func TestEtcdctlCheckDatascale(t *testing.T) {
	c := startCluster(t, target(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, *etcdctlBin, "--endpoints="+strings.Join(c.endpoints(), ","), "check", "datascale")
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS: Approximate system memory used") {
		t.Fatalf("etcdctl check datascale against %s: %v\n%s%s", c.kind, err, out, c.logs())
	}
}

// TestEtcdctlCheckPerf: `etcdctl check perf` (its small load: writes
// from many clients at a set rate for 60 s; then it compacts and
// defragments) passes on the target as on etcd: throughput, the slowest
// request and the latencies' spread within etcdctl's limits. Any "FAIL"
// in its output fails the test, so does a lone "Slowest request took too
// long" (etcdctl then ends with FAIL too).
func TestEtcdctlCheckPerf(t *testing.T) {
	c := startCluster(t, target(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, *etcdctlBin, "--endpoints="+strings.Join(c.endpoints(), ","),
		"check", "perf", "--load=s", "--auto-compact", "--auto-defrag")
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := cmd.CombinedOutput()
	// Progress bars are drawn with carriage returns; the verdicts are
	// lines of their own.
	var verdicts []string
	for _, l := range strings.Split(strings.ReplaceAll(string(out), "\r", "\n"), "\n") {
		if strings.HasPrefix(l, "PASS") || strings.HasPrefix(l, "FAIL") {
			verdicts = append(verdicts, l)
		}
	}
	t.Logf("etcdctl check perf against %s:\n%s", c.kind, strings.Join(verdicts, "\n"))
	if err != nil || !strings.Contains(string(out), "PASS: Throughput") || strings.Contains(string(out), "FAIL") {
		t.Fatalf("etcdctl check perf against %s: %v\n%s%s", c.kind, err, out, c.logs())
	}
}
