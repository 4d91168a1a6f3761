package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one server process we started; we stop only processes we own,
// by their pid.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own process group, so a terminal's Ctrl-C reaches only us and we
	// stop it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after 10s.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return p.name + " log (" + p.log + "):\n  " + strings.Join(lines, "\n  ")
}

type cluster struct {
	procs     []*proc
	endpoints []string // client endpoints, host:port
}

func (c *cluster) stop() {
	for _, p := range c.procs {
		p.stop()
	}
}

// start starts one member, serving clients at endpoint; if it cannot, it
// stops the members already started.
func (c *cluster) start(name, logPath, endpoint, bin string, args ...string) error {
	p, err := startProc(name, logPath, bin, args...)
	if err != nil {
		c.stop()
		return err
	}
	c.procs = append(c.procs, p)
	c.endpoints = append(c.endpoints, endpoint)
	return nil
}

func (c *cluster) failure(err error) error {
	var b strings.Builder
	b.WriteString(err.Error())
	for _, p := range c.procs {
		b.WriteString("\n")
		b.WriteString(p.logTail())
	}
	return errors.New(b.String())
}

// freePorts reserves n distinct loopback ports by listening on :0 and
// releasing them just before the servers bind.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// startEtcd starts n etcd members with equal settings to DKV's: heartbeat
// 100ms, election 1s (DKV: 100ms ticks, 10 election ticks), fsync on (the
// default; we never pass --unsafe-no-fsync). Debian's 3.4 and the 3.7
// build (etcd37) get the same command line: 3.7 removed the v2 API's
// flags (--enable-v2 and the like), which we never pass, and kept every
// flag below. Each release keeps its own defaults otherwise: 3.7 snapshots
// every 10,000 applied entries, 3.4 every 100,000.
func startEtcd(bin, dir string, n int) (*cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("e%d=http://%s", i+1, addr(ports[2*i+1])))
	}
	c := &cluster{}
	for i := range n {
		name := fmt.Sprintf("e%d", i+1)
		data := filepath.Join(dir, name)
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		client, peer := "http://"+addr(ports[2*i]), "http://"+addr(ports[2*i+1])
		err := c.start(name, filepath.Join(dir, name+".log"), addr(ports[2*i]), bin,
			"--name", name,
			"--data-dir", data,
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", "dkv-compare",
			"--initial-cluster-state", "new",
			"--heartbeat-interval", "100",
			"--election-timeout", "1000",
			// The get-big curve and -restart preload -bigkeys keys; at
			// 10,000,000 keys of 256 bytes that passes etcd's default 2 GiB
			// backend quota. 8 GiB is the most etcd recommends; the quota is
			// a size check only and costs nothing per request.
			"--quota-backend-bytes", "8589934592",
			"--logger", "zap",
			"--log-level", "warn",
		)
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// startDKV starts n `dkv serve` members. Fsync is on: dkv serve has no
// flag to turn it off.
func startDKV(bin, dir string, n int) (*cluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("n%d=%s", i+1, addr(ports[3*i+1])))
	}
	// A multi-node cluster needs a peer secret (docs/cluster.md).
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	c := &cluster{}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		data := filepath.Join(dir, name)
		err := c.start(name, filepath.Join(dir, name+".log"), addr(ports[3*i]), bin, "serve",
			"--name", name,
			"--data-dir", data,
			"--client-addr", addr(ports[3*i]),
			"--peer-addr", addr(ports[3*i+1]),
			"--http-addr", addr(ports[3*i+2]),
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", hex.EncodeToString(tok),
			"--pprof",
		)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "dkv %s: client %s, http %s (pprof at /debug/pprof)\n", name, addr(ports[3*i]), addr(ports[3*i+2]))
	}
	return c, nil
}

// waitReady polls probe until it succeeds for every endpoint, a member
// exits, or 60s pass.
func (c *cluster) waitReady(ctx context.Context, probe func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i := range c.endpoints {
		for {
			for _, p := range c.procs {
				if p.exited() {
					return c.failure(fmt.Errorf("%s exited: %v", p.name, p.err))
				}
			}
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			err := probe(pctx, i)
			pcancel()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return c.failure(fmt.Errorf("member %d (%s) not ready: %v", i+1, c.endpoints[i], err))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func httpReady(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// ensureEtcd finds etcd, installing Debian's etcd-server and etcd-client
// packages if it is missing.
func ensureEtcd(ctx context.Context, c config) (string, error) {
	if c.etcdBin != "" {
		return c.etcdBin, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if err := aptInstall(ctx, c, "etcd not found on PATH", "etcd-server", "etcd-client"); err != nil {
		return "", err
	}
	return exec.LookPath("etcd")
}

// aptInstall installs Debian packages (running `apt-get update` first only
// if `apt-cache policy` shows the first one has no candidate), unless
// -no-install or not root; missing says what is missing, for the error.
func aptInstall(ctx context.Context, c config, missing string, pkgs ...string) error {
	install := "apt-get install -y " + strings.Join(pkgs, " ")
	if c.noInstall {
		return fmt.Errorf("%s (%s)", missing, install)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s and not root: run `sudo %s` first", missing, install)
	}
	policy, _ := exec.CommandContext(ctx, "apt-cache", "policy", pkgs[0]).CombinedOutput()
	if !bytes.Contains(policy, []byte("Candidate:")) || bytes.Contains(policy, []byte("Candidate: (none)")) {
		fmt.Fprintf(os.Stderr, "%s has no install candidate: apt-get update\n", pkgs[0])
		if err := runLogged(ctx, "apt-get", "update"); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "%s: %s\n", missing, install)
	return runLogged(ctx, "env", append([]string{"DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y"}, pkgs...)...)
}

// zkDebianJar is the server jar of Debian's zookeeper package (shipped by
// libzookeeper-java); its manifest's Class-Path names the libraries it
// needs but no SLF4J binding, so zkDebianClasspath adds log4j 1.2's (both
// jars come with the package's dependencies), without which the server
// logs nothing.
const (
	zkDebianJar       = "/usr/share/java/zookeeper.jar"
	zkDebianClasspath = zkDebianJar + ":/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
)

// ensureZooKeeper finds java and the ZooKeeper server classpath,
// installing Debian's zookeeper package (which brings a JRE) if the jar is
// missing. We start the servers ourselves rather than through the
// package's systemd unit or zkServer.sh, like etcd.
func ensureZooKeeper(ctx context.Context, c config) (java, classpath string, err error) {
	classpath = c.zkClass
	if classpath == "" {
		classpath = zkDebianClasspath
		if _, err := os.Stat(zkDebianJar); err != nil {
			if err := aptInstall(ctx, c, zkDebianJar+" not found", "zookeeper"); err != nil {
				return "", "", err
			}
		}
	}
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", fmt.Errorf("ZooKeeper needs java on PATH: %w", err)
	}
	return java, classpath, nil
}

// zkVersion is the installed Debian zookeeper package's version.
func zkVersion() string {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "zookeeper").Output()
	if err != nil || len(out) == 0 {
		return "unknown"
	}
	return string(out)
}

// ZooKeeper's settings, equal in spirit to etcd's and DKV's: the leader
// pings its followers every tickTime/2 = 100 ms (etcd's heartbeat, DKV's
// raft tick) and a follower that hears nothing for syncLimit × tickTime =
// 1 s drops the leader and elects (etcd's election timeout, DKV's 10
// ticks). initLimit only bounds a follower's first sync at startup.
// maxSessionTimeout is raised from 20 ticks (4 s) so the client's
// zkSessionTimeout is granted as asked; maxClientCnxns=0 lifts the 60
// connections per client address, which the watch row's one session per
// watcher would pass with one node. forceSync=yes (the default, written
// out) fsyncs the transaction log before acknowledging, as the others do.
const zkConfig = `tickTime=200
initLimit=50
syncLimit=5
forceSync=yes
maxClientCnxns=0
maxSessionTimeout=60000
admin.enableServer=false
dataDir=%s
clientPortAddress=127.0.0.1
clientPort=%d
%s
`

// zkLog4j sends the server's log (Debian's ZooKeeper logs through log4j
// 1.2) to stdout, which startProc writes to the member's log file.
const zkLog4j = `log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
`

// startZooKeeper starts n ZooKeeper servers (QuorumPeerMain, an ensemble;
// one server runs standalone) with the settings in zkConfig and the heap
// upstream's zkServer.sh gives (ZK_SERVER_HEAP=1000 MB).
func startZooKeeper(java, classpath, dir string, n int) (*cluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	var servers []string
	for i := range n {
		servers = append(servers, fmt.Sprintf("server.%d=%s:%d", i+1, addr(ports[3*i+1]), ports[3*i+2]))
	}
	// Every member's files first, so a failure leaves nothing running.
	log4j := filepath.Join(dir, "log4j.properties")
	if err := os.WriteFile(log4j, []byte(zkLog4j), 0o644); err != nil {
		return nil, err
	}
	for i := range n {
		data := filepath.Join(dir, fmt.Sprintf("z%d", i+1))
		cfg := fmt.Sprintf(zkConfig, data, ports[3*i], strings.Join(servers, "\n"))
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintln(i+1)), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(data+".cfg", []byte(cfg), 0o644); err != nil {
			return nil, err
		}
	}
	c := &cluster{}
	for i := range n {
		name := fmt.Sprintf("z%d", i+1)
		err := c.start(name, filepath.Join(dir, name+".log"), addr(ports[3*i]), java,
			"-Xmx1000m",
			"-Dlog4j.configuration=file:"+log4j,
			"-cp", classpath,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, name+".cfg"),
		)
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

func runLogged(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func etcdVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// buildEtcd37 builds ./etcd37 of this module (bench/compare of repo),
// etcd's own main at the go.etcd.io/etcd/server/v3 version go.mod pins,
// into dir; Go's build cache makes every build after the first a link.
func buildEtcd37(ctx context.Context, repo, dir string) (string, error) {
	bin := filepath.Join(dir, "etcd37-bin") // not base/etcd37: its data
	fmt.Fprintln(os.Stderr, "building etcd 3.7: go build -o", bin, "./etcd37")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./etcd37")
	cmd.Dir = filepath.Join(repo, "bench", "compare")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build etcd 3.7: %w", err)
	}
	fmt.Fprintf(os.Stderr, "built etcd 3.7 in %s\n", time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

// etcdBuild says what a Go-built etcd binary links: the etcd server
// module's version and the Go toolchain, from its build info; "" for a
// binary without it.
func etcdBuild(bin string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "go.etcd.io/etcd/server/v3" {
			if d.Replace != nil {
				d = d.Replace
			}
			return d.Path + " " + d.Version + ", " + bi.GoVersion
		}
	}
	return ""
}

func buildDKV(ctx context.Context, repo, dir string) (string, error) {
	// Not base/dkv: that is the DKV cluster's data directory.
	bin := filepath.Join(dir, "dkv-bin")
	fmt.Fprintln(os.Stderr, "building dkv: go build -o", bin, "./cmd/dkv")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/dkv")
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build dkv: %w", err)
	}
	return bin, nil
}
