package main

import (
	"bytes"
	"context"
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
// default; we never pass --unsafe-no-fsync).
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
		p, err := startProc(name, filepath.Join(dir, name+".log"), bin,
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
			"--logger", "zap",
			"--log-level", "warn",
		)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		c.endpoints = append(c.endpoints, addr(ports[2*i]))
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
	c := &cluster{}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		data := filepath.Join(dir, name)
		p, err := startProc(name, filepath.Join(dir, name+".log"), bin, "serve",
			"--name", name,
			"--data-dir", data,
			"--client-addr", addr(ports[3*i]),
			"--peer-addr", addr(ports[3*i+1]),
			"--http-addr", addr(ports[3*i+2]),
			"--initial-cluster", strings.Join(initial, ","),
			"--pprof",
		)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		c.endpoints = append(c.endpoints, addr(ports[3*i]))
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
	if c.noInstall {
		return "", errors.New("etcd not found on PATH (apt-get install etcd-server etcd-client)")
	}
	if os.Geteuid() != 0 {
		return "", errors.New("etcd not found on PATH and not root: run `sudo apt-get install -y etcd-server etcd-client` first")
	}
	policy, _ := exec.CommandContext(ctx, "apt-cache", "policy", "etcd-server").CombinedOutput()
	if !bytes.Contains(policy, []byte("Candidate:")) || bytes.Contains(policy, []byte("Candidate: (none)")) {
		fmt.Fprintln(os.Stderr, "etcd-server has no install candidate: apt-get update")
		if err := runLogged(ctx, "apt-get", "update"); err != nil {
			return "", err
		}
	}
	fmt.Fprintln(os.Stderr, "installing etcd: apt-get install -y etcd-server etcd-client")
	if err := runLogged(ctx, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "etcd-server", "etcd-client"); err != nil {
		return "", err
	}
	return exec.LookPath("etcd")
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
