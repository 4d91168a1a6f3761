package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) devClusterCmd() *cobra.Command {
	var (
		nodes    int
		basePort int
		dataDir  string
		host     string
	)
	cmd := &cobra.Command{
		Use:   "dev-cluster",
		Short: "Run a local N-node cluster of dkv serve processes until Ctrl-C",
		Long: `Run a local cluster for trying DKV out: N "dkv serve" processes on
loopback, each with its own data dir under --data-dir, forming one cluster.
Member i (from 1) listens on client port base+10*(i-1), peer port +1 and
HTTP port +2. Their output is prefixed with the member's name. Ctrl-C
stops them all. Data is kept, so the same command restarts the cluster.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 7 {
				return usagef("--nodes must be between 1 and 7, not %d", nodes)
			}
			if basePort < 1024 || basePort+10*nodes > 65535 {
				return usagef("--base-port %d leaves no room for %d members", basePort, nodes)
			}
			return a.devCluster(nodes, basePort, host, dataDir)
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "number of members (1-7)")
	f.IntVar(&basePort, "base-port", 17861, "client port of the first member")
	f.StringVar(&dataDir, "data-dir", "./dkv-dev", "parent directory of the members' data dirs")
	f.StringVar(&host, "host", "127.0.0.1", "loopback address to listen on")
	return cmd
}

func (a *app) devCluster(nodes, basePort int, host, dataDir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	type member struct{ name, client, peer, http, dir string }
	var ms []member
	var initial []string
	for i := 0; i < nodes; i++ {
		p := basePort + 10*i
		m := member{
			name:   fmt.Sprintf("n%d", i+1),
			client: fmt.Sprintf("%s:%d", host, p),
			peer:   fmt.Sprintf("%s:%d", host, p+1),
			http:   fmt.Sprintf("%s:%d", host, p+2),
			dir:    filepath.Join(dataDir, fmt.Sprintf("n%d", i+1)),
		}
		ms = append(ms, m)
		initial = append(initial, m.name+"="+m.peer)
	}
	// A fresh random token per run: the dev cluster's peer port admits
	// its own members only (a reused data dir keeps its first secret).
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	token := hex.EncodeToString(tok)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var (
		wg    sync.WaitGroup
		procs []*exec.Cmd
		outMu sync.Mutex
	)
	prefix := func(name string, r io.Reader, w io.Writer) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			outMu.Lock()
			fmt.Fprintf(w, "[%s] %s\n", name, sc.Text())
			outMu.Unlock()
		}
	}
	for _, m := range ms {
		c := exec.Command(self, "serve", "--name", m.name, "--client-addr", m.client, "--peer-addr", m.peer,
			"--http-addr", m.http, "--data-dir", m.dir, "--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token)
		stdout, _ := c.StdoutPipe()
		stderr, _ := c.StderrPipe()
		if err := c.Start(); err != nil {
			for _, p := range procs {
				p.Process.Signal(syscall.SIGTERM)
			}
			return fmt.Errorf("start %s: %w", m.name, err)
		}
		procs = append(procs, c)
		wg.Add(2)
		go prefix(m.name, stdout, a.stdout)
		go prefix(m.name, stderr, a.stderr)
	}
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	outMu.Lock()
	fmt.Fprintf(a.stdout, "dev cluster of %d members; data in %s\n", nodes, dataDir)
	for _, m := range ms {
		fmt.Fprintf(a.stdout, "  %s  client %s  http %s  peer %s\n", m.name, m.client, m.http, m.peer)
	}
	fmt.Fprintf(a.stdout, "try:  export DKV_ENDPOINTS=%s\n      dkv put hello world && dkv get hello && dkv member list\nCtrl-C stops the cluster.\n", strings.Join(eps, ","))
	outMu.Unlock()

	exited := make(chan struct{}, len(procs))
	for _, p := range procs {
		go func(p *exec.Cmd) { p.Wait(); exited <- struct{}{} }(p)
	}
	// A member may exit on its own (removed from the cluster, or killed to
	// try failover); the rest keep running until Ctrl-C or all are gone.
	running := len(procs)
wait:
	for running > 0 {
		select {
		case <-ctx.Done():
			break wait
		case <-exited:
			running--
		}
	}
	for _, p := range procs {
		p.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(10 * time.Second)
	for range running {
		select {
		case <-exited:
		case <-deadline:
			for _, p := range procs {
				p.Process.Kill()
			}
			return fmt.Errorf("members did not stop within 10s; killed")
		}
	}
	wg.Wait()
	return nil
}
