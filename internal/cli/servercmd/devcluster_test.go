package servercmd_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// freeHost picks a random loopback address (as testutil.FreeAddr does: other
// tests' connections take ephemeral ports on 127.0.0.1) and a base port
// whose dev-cluster ports (base+10*i+{0,1,2}) on it are free now.
func freeHost(t *testing.T, nodes int) (host string, base int) {
	t.Helper()
	for try := 0; try < 50; try++ {
		host = fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(250), rand.IntN(256), 1+rand.IntN(250))
		base = 20000 + 10*rand.IntN(1000)
		ok := true
		var ls []net.Listener
		for i := 0; i < nodes && ok; i++ {
			for j := 0; j < 3; j++ {
				l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", host, base+10*i+j))
				if err != nil {
					ok = false
					break
				}
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return host, base
		}
	}
	t.Fatal("no free port range for a dev cluster")
	return "", 0
}

// devCluster is a running `dkv dev-cluster` with its stdin and output.
type devCluster struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string
	eps   string
	done  chan struct{}
}

func startDevCluster(t *testing.T, dir, host string, base int, extra ...string) *devCluster {
	t.Helper()
	args := append([]string{"dev-cluster", "--nodes", "3", "--host", host, "--base-port", fmt.Sprint(base), "--data-dir", dir}, extra...)
	d := &devCluster{t: t, cmd: exec.Command(clitest.Bin, args...), done: make(chan struct{})}
	var err error
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			d.mu.Unlock()
		}
	}()
	go func() { d.cmd.Wait(); pw.Close(); close(d.done) }()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			d.mu.Lock()
			t.Logf("dev-cluster output:\n%s", clitest.Tail(strings.Join(d.lines, "\n"), 4000))
			d.mu.Unlock()
		}
	})
	var eps []string
	for i := 0; i < 3; i++ {
		eps = append(eps, fmt.Sprintf("%s:%d", host, base+10*i))
	}
	d.eps = strings.Join(eps, ",")
	for _, n := range []string{"n1", "n2", "n3"} {
		d.waitLine("[" + n + "] ready")
	}
	return d
}

// waitLine waits for a line starting with want and consumes it, so the
// next waitLine for the same text needs a new line.
func (d *devCluster) waitLine(want string) {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		d.mu.Lock()
		for i, l := range d.lines {
			if l == want || strings.HasPrefix(l, want) {
				d.lines = append(d.lines[:i:i], d.lines[i+1:]...)
				d.mu.Unlock()
				return
			}
		}
		d.mu.Unlock()
		select {
		case <-d.done:
			d.t.Fatalf("dev-cluster exited before printing %q", want)
		case <-time.After(50 * time.Millisecond):
		}
	}
	d.t.Fatalf("dev-cluster did not print %q within 60s", want)
}

func (d *devCluster) send(cmd string) {
	d.t.Helper()
	if _, err := fmt.Fprintln(d.stdin, cmd); err != nil {
		d.t.Fatal(err)
	}
}

// dkv runs the CLI against the dev cluster's endpoints.
func (d *devCluster) dkv(args ...string) clitest.Result {
	d.t.Helper()
	n := &clitest.Node{T: d.t, Addr: d.eps}
	return n.DKV("", args...)
}

// eventually runs dkv until check accepts its result.
func (d *devCluster) eventually(what string, check func(clitest.Result) bool, args ...string) clitest.Result {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := d.dkv(args...)
		if check(r) {
			return r
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: dkv %q never did: last exit %d\n%s%s", what, args, r.Code, r.Stdout, r.Stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func rowOf(table, name string) string {
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == name {
			return l
		}
	}
	return ""
}

// A member killed in a dev cluster is reported there, shows as
// unreachable in member list and unhealthy in endpoint health, and comes
// back with "restart NAME" on dev-cluster's stdin.
func TestDevClusterDeadMemberVisibleAndRestartable(t *testing.T) {
	dir := t.TempDir()
	host, base := freeHost(t, 3)
	d := startDevCluster(t, dir, host, base)

	// --cluster asks the members the member list names with a client URL,
	// which a member publishes once it has started: wait for all three.
	r := d.eventually("all healthy", func(r clitest.Result) bool {
		return r.Code == 0 && strings.Count(r.Stdout, " is healthy: served a linearizable read: took = ") == 3
	}, "endpoint", "health", "--cluster")
	r = d.dkv("endpoint", "status", "--cluster")
	if r.Code != 0 || len(strings.Split(strings.TrimSpace(r.Stdout), "\n")) != 4 || !strings.HasPrefix(r.Stdout, "ENDPOINT ") {
		t.Fatalf("endpoint status --cluster: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	d.dkv("put", "k", "v")

	d.send("kill n3")
	d.waitLine("[dev-cluster] n3 exited: signal: killed")
	// Ask n1 and n2 only: the CLI must not depend on the dead member.
	eps := strings.Join(strings.Split(d.eps, ",")[:2], ",")
	r = d.eventually("n3 unreachable", func(r clitest.Result) bool {
		return r.Code == 0 && strings.Contains(rowOf(r.Stdout, "n3"), "unreachable")
	}, "--endpoints", eps, "member", "list")
	for _, n := range []string{"n1", "n2"} {
		if row := rowOf(r.Stdout, n); !strings.Contains(row, "reachable") && !strings.Contains(row, "self") || strings.Contains(row, "unreachable") {
			t.Errorf("member list row of live %s: %q", n, row)
		}
	}
	r = d.dkv("endpoint", "health", "--cluster", "--endpoints", eps, "--timeout", "2s")
	if r.Code != 7 || !strings.Contains(r.Stdout, strings.Split(d.eps, ",")[2]+" is unhealthy") || strings.Count(r.Stdout, " is healthy") != 2 {
		t.Errorf("endpoint health with n3 dead: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	d.send("restart n3")
	d.waitLine("[dev-cluster] n3 started")
	d.waitLine("[n3] ready")
	d.eventually("n3 reachable again", func(r clitest.Result) bool {
		row := rowOf(r.Stdout, "n3")
		return r.Code == 0 && strings.Contains(row, "reachable") && !strings.Contains(row, "unreachable")
	}, "member", "list")
	if r := d.dkv("get", "k", "--endpoints", strings.Split(d.eps, ",")[2], "--serializable"); r.Stdout != "v\n" {
		d.eventually("n3 caught up", func(r clitest.Result) bool { return r.Stdout == "v\n" }, "get", "k", "--endpoints", strings.Split(d.eps, ",")[2], "--serializable")
	}
}

// Issue #32: a dev cluster's members prove a random secret that only
// the operator's files hold (DATA-DIR/peer-secret, mode 0600), kept
// across runs; a member added later joins with --peer-secret-file.
func TestDevClusterPeerSecret(t *testing.T) {
	dir := t.TempDir()
	host, base := freeHost(t, 3)
	d := startDevCluster(t, dir, host, base)
	file := filepath.Join(dir, "peer-secret")
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev-cluster's peer secret file: %v %v, want mode 0600", fi, err)
	}
	sec, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.lineWith("peer secret: "); !strings.Contains(got, "--peer-secret-file "+file) {
		t.Errorf("dev-cluster does not say how to start a member added later: %q", got)
	}
	d.mu.Lock()
	printed := strings.Contains(strings.Join(d.lines, "\n"), strings.TrimSpace(string(sec)))
	d.mu.Unlock()
	if printed {
		t.Error("dev-cluster printed the peer secret")
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		got, err := os.ReadFile(filepath.Join(dir, n, "peer-secret"))
		if err != nil || strings.TrimSpace(string(got)) != strings.TrimSpace(string(sec)) {
			t.Errorf("%s's peer secret is not the dev cluster's: %v", n, err)
		}
	}

	// A fourth member joins with the same file, and takes part.
	peer, client := testutil.FreeAddr(t), testutil.FreeAddr(t)
	r := d.dkv("member", "add", "n4", peer)
	if r.Code != 0 || !strings.Contains(r.Stdout, "--peer-secret-file") || strings.Contains(r.Stdout, strings.TrimSpace(string(sec))) {
		t.Fatalf("member add: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	n4 := exec.Command(clitest.Bin, "serve", "--name", "n4", "--peer-addr", peer, "--client-addr", client, "--http-addr", "",
		"--data-dir", filepath.Join(dir, "n4"), "--join", d.eps, "--peer-secret-file", file)
	var out bytes.Buffer
	n4.Stdout, n4.Stderr = &out, &out
	if err := n4.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n4.Process.Kill(); n4.Wait() })
	d.dkv("put", "k4", "v4")
	d.eventually("n4 serving what the cluster wrote", func(r clitest.Result) bool { return r.Stdout == "v4\n" }, "get", "k4", "--endpoints", client)
}

// --fresh starts from empty data dirs; without it the data is kept.
// --pprof serves /debug/pprof on the members' HTTP ports.
func TestDevClusterFresh(t *testing.T) {
	dir := t.TempDir()
	host, base := freeHost(t, 3)
	d := startDevCluster(t, dir, host, base)
	d.eventually("a write", func(r clitest.Result) bool { return r.Code == 0 }, "put", "kept", "yes")
	d.cmd.Process.Signal(syscall.SIGINT)
	<-d.done
	if _, err := os.Stat(filepath.Join(dir, "n1")); err != nil {
		t.Fatal(err)
	}

	d = startDevCluster(t, dir, host, base)
	d.eventually("the key kept", func(r clitest.Result) bool { return r.Stdout == "yes\n" }, "get", "kept")
	pprofStatus := func() int {
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/debug/pprof/", host, base+2))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := pprofStatus(); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
	d.cmd.Process.Signal(syscall.SIGINT)
	<-d.done

	// --pprof: every member profiles (checked on the first).
	d = startDevCluster(t, dir, host, base, "--fresh", "--pprof")
	d.eventually("a leader", func(r clitest.Result) bool { return r.Code == 0 }, "endpoint", "health", "--cluster")
	if r := d.dkv("get", "kept"); r.Code != 3 {
		t.Fatalf("after --fresh, get kept: exit %d %q, want 3 (NotFound)", r.Code, r.Stdout)
	}
	if code := pprofStatus(); code != http.StatusOK {
		t.Fatalf("/debug/pprof/ with --pprof: %d, want 200", code)
	}
}

// lineWith returns the first output line starting with prefix (after
// waitLine has seen one).
func (d *devCluster) lineWith(prefix string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// dev-cluster --secure: the printed command line works, a plaintext
// client and a client without a certificate are refused, HTTPS serves
// with the client certificate, and the root password file is private.
func TestDevClusterSecure(t *testing.T) {
	dir := t.TempDir()
	host, base := freeHost(t, 3)
	d := startDevCluster(t, dir, host, base, "--secure")
	d.waitLine("[dev-cluster] secure cluster up")
	try := d.lineWith("try:  dkv ")
	f := strings.Fields(strings.TrimPrefix(try, "try:  dkv "))
	if len(f) == 0 || !strings.Contains(try, "--cacert") || !strings.Contains(try, "--cert") || !strings.Contains(try, "--key") {
		t.Fatalf("no connect command line printed: %q", try)
	}
	n := &clitest.Node{T: t, Addr: d.eps}
	if r := n.DKV("", f...); r.Code != 0 {
		t.Fatalf("the printed command %q: exit %d\n%s%s", try, r.Code, r.Stdout, r.Stderr)
	}
	// f is: --endpoints EPS --cacert CA --cert C --key K put hello world.
	flags := f[:len(f)-3]
	if r := n.DKV("", append(flags, "get", "hello")...); r.Code != 0 || strings.TrimSpace(r.Stdout) != "world" {
		t.Errorf("get hello over TLS: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := n.DKV("", "get", "hello"); r.Code != 7 || !strings.Contains(r.Stderr, "does the cluster use TLS? connect with --cacert") {
		t.Errorf("plaintext get on a --secure cluster: exit %d %q %s; want 7 (Unavailable) with a hint at --cacert", r.Code, r.Stdout, r.Stderr)
	}
	if r := n.DKV("", flags[0], flags[1], flags[2], flags[3], "get", "hello"); r.Code != 7 {
		t.Errorf("get with --cacert but no client certificate: exit %d %q %s; want 7 (Unavailable)", r.Code, r.Stdout, r.Stderr)
	}
	// dkv bench takes the TLS flags too, so TLS cost can be measured.
	if r := n.DKV("", append(flags, "bench", "put", "--total", "20", "--clients", "2", "--conns", "1", "--keys", "10", "-q")...); r.Code != 0 || !strings.Contains(r.Stdout, "OPS/S") {
		t.Errorf("bench put over TLS: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	fi, err := os.Stat(filepath.Join(dir, "root-password"))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() < 16 {
		t.Errorf("root-password: %v %v", fi, err)
	}
	if !strings.Contains(d.lineWith("  root password: "), filepath.Join(dir, "root-password")) {
		t.Errorf("the root password file is not named in the output")
	}
	// Auth is on: the client certificate (CN root) authenticates as root,
	// and so does the root password.
	if r := n.DKV("", append(flags, "auth", "status")...); r.Code != 0 || !strings.Contains(r.Stdout, "Authentication Status: true") {
		t.Errorf("auth status on a --secure cluster: exit %d %q %s; want enabled", r.Code, r.Stdout, r.Stderr)
	}
	pw, err := os.ReadFile(filepath.Join(dir, "root-password"))
	if err != nil {
		t.Fatal(err)
	}
	if r := n.DKV("", append(flags, "--user", "root:"+strings.TrimSpace(string(pw)), "get", "hello")...); r.Code != 0 || strings.TrimSpace(r.Stdout) != "world" {
		t.Errorf("get as root with the generated password: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	// dkv bench authenticates once and sends the token with every call.
	if r := n.DKV("", append(flags, "--user", "root:"+strings.TrimSpace(string(pw)), "bench", "put", "--total", "20", "--clients", "2", "--conns", "1", "--keys", "10", "-q")...); r.Code != 0 || !strings.Contains(r.Stdout, "OPS/S") {
		t.Errorf("bench put as root with a token: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := n.DKV("", append(flags, "--user", "root:wrong", "bench", "put", "--total", "20", "--clients", "2", "--conns", "1", "--keys", "10", "-q")...); r.Code == 0 || !strings.Contains(r.Stderr, "authenticating as \"root\"") {
		t.Errorf("bench put with a wrong password: exit %d\n%s%s; want a failure naming the authentication", r.Code, r.Stdout, r.Stderr)
	}
	if r := n.DKV("", append(flags, "--user", "root:wrong", "get", "hello")...); r.Code != 13 {
		t.Errorf("get as root with a wrong password: exit %d %q %s; want 13 (Unauthenticated)", r.Code, r.Stdout, r.Stderr)
	}
}
