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
