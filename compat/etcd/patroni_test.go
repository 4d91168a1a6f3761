package etcdcompat

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
)

var (
	patroniBin  = flag.String("patroni", "/usr/bin/patroni", "Patroni (Debian's patroni package)")
	pgBinDir    = flag.String("pg-bin-dir", "/usr/lib/postgresql/15/bin", "PostgreSQL's bin directory (Debian's postgresql package)")
	patroniUser = flag.String("patroni-user", "postgres", "the user Patroni and PostgreSQL run as (PostgreSQL refuses to run as root)")
)

// pgNode is one Patroni process and the PostgreSQL it manages.
type pgNode struct {
	name        string
	pg, rest    string // host:port of PostgreSQL and of Patroni's REST API
	config, log string
	cmd         *exec.Cmd
	exited      chan struct{}
	uid, gid    uint32
}

func (n *pgNode) start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(*patroniBin, n.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a kill reaches PostgreSQL too (a
	// machine that dies takes both), and Patroni's user: PostgreSQL
	// refuses to run as root.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: n.uid, Gid: n.gid}}
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(n.config), "PATH="+*pgBinDir+":"+os.Getenv("PATH"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start patroni %s: %v", n.name, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(n.exited) }()
}

// kill kills Patroni and its PostgreSQL at once, as a machine that dies.
func (n *pgNode) kill() {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.exited
	// Children that left the group (none should) would keep the port.
}

// role is what Patroni's REST API says this node is: "primary",
// "replica", or "" while it cannot say.
func (n *pgNode) role(ctx context.Context) string {
	for _, path := range []string{"/primary", "/replica"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.rest+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			return strings.TrimPrefix(path, "/")
		}
	}
	return ""
}

// psql runs one statement on n's PostgreSQL and returns its output.
func (n *pgNode) psql(ctx context.Context, sql string) (string, error) {
	host, port, _ := strings.Cut(n.pg, ":")
	cmd := exec.CommandContext(ctx, filepath.Join(*pgBinDir, "psql"), "-h", host, "-p", port, "-U", "postgres", "-d", "postgres", "-tAc", sql)
	cmd.Env = append(os.Environ(), "PGPASSWORD=pg", "PGCONNECT_TIMEOUT=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql on %s: %v: %s", n.name, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// TestPatroni: Patroni (Debian's 3.0) runs three PostgreSQL 15 instances
// with the target as its DCS (etcd3, configured with the members' client
// URLs only, as Patroni users do), unchanged: it elects a primary, the
// replicas stream from it, a primary killed with its Patroni (kill -9 of
// the group) is replaced by a promoted, writable replica, and a killed
// DCS leader costs the primary nothing: it keeps its role and takes
// writes. The failover time is logged, to set beside etcd's.
func TestPatroni(t *testing.T) {
	for _, bin := range []string{*patroniBin, filepath.Join(*pgBinDir, "postgres")} {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%v: this test needs Debian's patroni and postgresql packages (apt-get install patroni postgresql; .ci/run installs them)", err)
		}
	}
	u, err := user.Lookup(*patroniUser)
	if err != nil {
		t.Fatalf("user %q: %v (Debian's postgresql package creates it)", *patroniUser, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)

	c := startCluster(t, target(t))
	// PostgreSQL's data dirs must belong to its user, and the path to
	// them be open to it: not under t.TempDir(), which is root's 0700.
	base, err := os.MkdirTemp("", "patroni-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	var nodes []*pgNode
	t.Cleanup(func() {
		for _, n := range nodes {
			n.kill()
		}
	})
	hosts := `"` + strings.Join(c.endpoints(), `", "`) + `"`
	scope := fmt.Sprintf("dkv-compat-%d", time.Now().UnixNano())
	for i := 1; i <= 3; i++ {
		n := &pgNode{name: fmt.Sprintf("pg%d", i), pg: testutil.FreeAddr(t), rest: testutil.FreeAddr(t), uid: uint32(uid), gid: uint32(gid)}
		dir := filepath.Join(base, n.name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		n.config, n.log = filepath.Join(dir, "patroni.yml"), filepath.Join(base, n.name+".log")
		_, pgPort, _ := strings.Cut(n.pg, ":")
		cfg := fmt.Sprintf(`scope: %s
name: %s
log:
  level: INFO
restapi:
  listen: %s
  connect_address: %s
etcd3:
  hosts: [%s]
  protocol: http
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 2
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    postgresql:
      use_pg_rewind: false
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.0/8 trust
    - host all all 127.0.0.0/8 trust
postgresql:
  listen: %s
  connect_address: %s
  data_dir: %s
  bin_dir: %s
  pgpass: %s
  authentication:
    replication:
      username: replicator
      password: rep
    superuser:
      username: postgres
      password: pg
  parameters:
    unix_socket_directories: %s
    port: %s
`, scope, n.name, n.rest, n.rest, hosts, n.pg, n.pg, filepath.Join(dir, "data"), *pgBinDir, filepath.Join(dir, "pgpass"), dir, pgPort)
		if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(n.config, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	logs := func() string {
		var b strings.Builder
		for _, n := range nodes {
			data, _ := os.ReadFile(n.log)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			if len(lines) > 25 {
				lines = lines[len(lines)-25:]
			}
			fmt.Fprintf(&b, "\n%s (%s):\n%s", n.name, n.log, strings.Join(lines, "\n"))
		}
		return b.String() + c.logs()
	}
	for _, n := range nodes {
		n.start(t)
	}

	// roles waits until exactly one running node is primary and every
	// other running node a replica, and returns the primary.
	roles := func(what string, limit time.Duration, running []*pgNode) *pgNode {
		t.Helper()
		var primary *pgNode
		deadline := time.Now().Add(limit)
		last := ""
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			primary = nil
			var got []string
			ok := true
			for _, n := range running {
				r := n.role(ctx)
				got = append(got, n.name+"="+r)
				switch r {
				case "primary":
					if primary != nil {
						ok = false
					}
					primary = n
				case "replica":
				default:
					ok = false
				}
			}
			cancel()
			last = strings.Join(got, " ")
			if ok && primary != nil {
				return primary
			}
			time.Sleep(500 * time.Millisecond) // poll interval, not a synchronisation
		}
		t.Fatalf("%s: no single primary with the others replicas after %v (roles: %s)%s", what, limit, last, logs())
		return nil
	}
	// replicated writes a row on the primary and waits for it on every
	// other running node.
	seq := 0
	replicated := func(what string, primary *pgNode, running []*pgNode) {
		t.Helper()
		seq++
		// Patroni's REST API calls a node primary once it holds the
		// leader key, which may be while its PostgreSQL is still
		// finishing promotion (in recovery, read-only): wait for that to
		// end, then write once.
		testutil.EventuallyNoError(t, 60*time.Second, fmt.Sprintf("%s: %s out of recovery", what, primary.name), func(ctx context.Context) error {
			out, err := primary.psql(ctx, "SELECT pg_is_in_recovery()")
			if err != nil {
				return err
			}
			if out != "f" {
				return errors.New("still in recovery: " + out)
			}
			return nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := primary.psql(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS t (n int); INSERT INTO t VALUES (%d)", seq)); err != nil {
			t.Fatalf("%s: write on the primary %s: %v%s", what, primary.name, err, logs())
		}
		for _, n := range running {
			testutil.EventuallyNoError(t, 60*time.Second, fmt.Sprintf("%s: row %d on %s", what, seq, n.name), func(ctx context.Context) error {
				out, err := n.psql(ctx, fmt.Sprintf("SELECT count(*) FROM t WHERE n = %d", seq))
				if err != nil {
					return err
				}
				if out != "1" {
					return errors.New("not yet: " + out)
				}
				return nil
			})
		}
	}

	primary := roles("bootstrap", 180*time.Second, nodes)
	t.Logf("%s: %s is primary", c.kind, primary.name)
	replicated("bootstrap", primary, nodes)

	// The primary's machine dies: Patroni and PostgreSQL at once.
	var rest []*pgNode
	for _, n := range nodes {
		if n != primary {
			rest = append(rest, n)
		}
	}
	killed := time.Now()
	primary.kill()
	newPrimary := roles("after the primary was killed", 120*time.Second, rest)
	t.Logf("%s: primary %s killed; %s promoted after %v (ttl 20s, loop_wait 2s)", c.kind, primary.name, newPrimary.name, time.Since(killed).Round(100*time.Millisecond))
	replicated("after failover", newPrimary, rest)

	// The DCS loses its leader: Patroni keeps its primary and it keeps
	// taking writes.
	cli := c.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dcsLeader, err := c.leader(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	dcsLeader.Kill()
	for range 5 {
		if p := roles("after the DCS leader was killed", 60*time.Second, rest); p != newPrimary {
			t.Fatalf("%s leader %s killed: primary moved from %s to %s%s", c.kind, dcsLeader.Name, newPrimary.name, p.name, logs())
		}
		replicated("after the DCS leader was killed", newPrimary, rest)
		time.Sleep(2 * time.Second) // spread the checks over loop_wait rounds; each check waits on its own
	}
}
