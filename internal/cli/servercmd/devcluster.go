package servercmd

import (
	"bufio"
	"context"
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

	"github.com/dkv-io/dkv/internal/cli"
	"github.com/dkv-io/dkv/server"
	"github.com/spf13/cobra"
)

const devClusterHelp = `Type a command and Enter while it runs:
  restart NAME|all   start a member that exited (or stop and start it)
  kill NAME          SIGKILL a member, to try failover
  stop NAME          SIGTERM a member
  list               show each member and whether it runs`

func devClusterCmd(a *cli.App) *cobra.Command {
	var (
		nodes    int
		basePort int
		dataDir  string
		host     string
		fresh    bool
		secure   bool
		pprof    bool
	)
	cmd := &cobra.Command{
		Use:   "dev-cluster",
		Short: "Run a local N-node cluster of dkv serve processes until Ctrl-C",
		Long: `Run a local cluster for trying DKV out: N "dkv serve" processes on
loopback, each with its own data dir under --data-dir, forming one cluster.
Member i (from 1) listens on client port base+10*(i-1), peer port +1 and
HTTP port +2. Their output is prefixed with the member's name. Ctrl-C
stops them all. Data is kept, so the same command restarts the cluster;
--fresh deletes the members' data dirs first.

When a member exits (killed, crashed, removed from the cluster) dev-cluster
prints "[dev-cluster] NAME exited: ..." and keeps the others running; it
stops when every member has exited.

The members prove a random peer secret to each other, made once in
DATA-DIR/peer-secret (mode 0600) and passed with --peer-secret-file; a
member added later (dkv member add, then dkv serve --join) is started
with the same --peer-secret-file.

--secure makes a throwaway CA, member certificates and a client
certificate in DATA-DIR/tls (kept for the next run), and a random root
password in DATA-DIR/root-password (mode 0600), and starts the members with
TLS on the client and HTTP ports (client certificates required) and mutual
TLS on the peer port; it prints the --cacert/--cert/--key flags to connect
with (docs/security.md). ` + devClusterHelp,
		Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 7 {
				return cli.Usagef("--nodes must be between 1 and 7, not %d", nodes)
			}
			if basePort < 1024 || basePort+10*nodes > 65535 {
				return cli.Usagef("--base-port %d leaves no room for %d members", basePort, nodes)
			}
			return devCluster(a, nodes, basePort, host, dataDir, fresh, secure, pprof)
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "number of members (1-7)")
	f.IntVar(&basePort, "base-port", 17861, "client port of the first member")
	f.StringVar(&dataDir, "data-dir", "./dkv-dev", "parent directory of the members' data dirs")
	f.StringVar(&host, "host", "127.0.0.1", "loopback address to listen on")
	f.BoolVar(&secure, "secure", false, "TLS on every port with a throwaway CA and certificates made in DATA-DIR/tls, and a root password in DATA-DIR/root-password")
	f.BoolVar(&fresh, "fresh", false, "delete the members' data dirs (DATA-DIR/n1 ...) first: start an empty cluster")
	f.BoolVar(&pprof, "pprof", false, "serve /debug/pprof on every member's HTTP address, for profiling the cluster under load (dkv serve --pprof)")
	return cmd
}

// devSecretFile holds a dev cluster's peer secret, in its DATA-DIR.
const devSecretFile = "peer-secret"

// devPeerSecret returns the dev cluster's peer secret file, making a
// random secret (mode 0600) the first time.
func devPeerSecret(dataDir string) (string, error) {
	path := filepath.Join(dataDir, devSecretFile)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", err
	}
	sec, err := server.NewPeerSecret()
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("peer secret: %w", err)
	}
	if _, err := f.WriteString(sec); err != nil {
		f.Close()
		return "", fmt.Errorf("peer secret: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("peer secret: %w", err)
	}
	return path, nil
}

// devMember is one dkv serve process of a dev cluster.
type devMember struct {
	name, client, peer, http, dir string
	args                          []string

	cmd     *exec.Cmd
	running bool
}

type devExit struct {
	m   *devMember
	cmd *exec.Cmd
	err error
}

func devCluster(a *cli.App, nodes, basePort int, host, dataDir string, fresh, secure, pprof bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var ms []*devMember
	var initial []string
	for i := 0; i < nodes; i++ {
		p := basePort + 10*i
		m := &devMember{
			name:   fmt.Sprintf("n%d", i+1),
			client: fmt.Sprintf("%s:%d", host, p),
			peer:   fmt.Sprintf("%s:%d", host, p+1),
			http:   fmt.Sprintf("%s:%d", host, p+2),
			dir:    filepath.Join(dataDir, fmt.Sprintf("n%d", i+1)),
		}
		ms = append(ms, m)
		initial = append(initial, m.name+"="+m.peer)
	}
	if fresh {
		for _, f := range []string{filepath.Join(dataDir, "tls"), filepath.Join(dataDir, "root-password"), filepath.Join(dataDir, devSecretFile)} {
			if err := os.RemoveAll(f); err != nil {
				return fmt.Errorf("--fresh: %w", err)
			}
		}
	}
	// The peer secret, as an operator would give it: a random secret in
	// a file of its own, passed to every member (and to any member
	// started later with --join), never sent over the client port.
	secretFile, err := devPeerSecret(dataDir)
	if err != nil {
		return err
	}
	var pki *devPKI
	var names []string
	for _, m := range ms {
		names = append(names, m.name)
	}
	if secure {
		if pki, err = makeDevPKI(dataDir, host, names); err != nil {
			return fmt.Errorf("--secure: making certificates: %w", err)
		}
	}
	for _, m := range ms {
		m.args = []string{"serve", "--name", m.name, "--client-addr", m.client, "--peer-addr", m.peer,
			"--http-addr", m.http, "--data-dir", m.dir, "--initial-cluster", strings.Join(initial, ","), "--peer-secret-file", secretFile}
		if pki != nil {
			m.args = append(m.args, pki.serveArgs(m.name, names)...)
		}
		if pprof {
			m.args = append(m.args, "--pprof")
		}
		if fresh {
			if err := os.RemoveAll(m.dir); err != nil {
				return fmt.Errorf("--fresh: %w", err)
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var (
		outMu sync.Mutex
		pipes sync.WaitGroup
	)
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(a.Stdout(), "[dev-cluster] "+format+"\n", args...)
	}
	prefix := func(name string, r io.Reader, w io.Writer, done *sync.WaitGroup) {
		defer done.Done()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			outMu.Lock()
			fmt.Fprintf(w, "[%s] %s\n", name, sc.Text())
			outMu.Unlock()
		}
	}
	exits := make(chan devExit, len(ms))
	start := func(m *devMember) error {
		c := exec.Command(self, m.args...)
		stdout, err := c.StdoutPipe()
		if err != nil {
			return err
		}
		stderr, err := c.StderrPipe()
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return fmt.Errorf("start %s: %w", m.name, err)
		}
		m.cmd, m.running = c, true
		var done sync.WaitGroup
		done.Add(2)
		pipes.Add(1)
		go prefix(m.name, stdout, a.Stdout(), &done)
		go prefix(m.name, stderr, a.Stderr(), &done)
		go func() {
			defer pipes.Done()
			done.Wait() // read everything before Wait closes the pipes
			exits <- devExit{m: m, cmd: c, err: c.Wait()}
		}()
		return nil
	}
	signalAll := func(sig os.Signal) {
		for _, m := range ms {
			if m.running {
				m.cmd.Process.Signal(sig)
			}
		}
	}
	for _, m := range ms {
		if err := start(m); err != nil {
			signalAll(syscall.SIGTERM)
			return err
		}
	}
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	outMu.Lock()
	fmt.Fprintf(a.Stdout(), "dev cluster of %d members; data in %s\n", nodes, dataDir)
	for _, m := range ms {
		fmt.Fprintf(a.Stdout(), "  %s  client %s  http %s  peer %s\n", m.name, m.client, m.http, m.peer)
	}
	fmt.Fprintf(a.Stdout(), "peer secret: %s (mode 0600); start a member added later with --peer-secret-file %s\n", secretFile, secretFile)
	if pki == nil {
		fmt.Fprintf(a.Stdout(), "try:  export DKV_ENDPOINTS=%s\n      dkv put hello world && dkv get hello && dkv member list\nCtrl-C stops the cluster.\n%s\n", strings.Join(eps, ","), devClusterHelp)
	} else {
		fmt.Fprintf(a.Stdout(), "secure: TLS on every port (client certificates required), certificates in %s\n", pki.dir)
		fmt.Fprintf(a.Stdout(), "  auth enabled: the client certificate (CN root) is user root; so is --user root with the\n")
		fmt.Fprintf(a.Stdout(), "  root password: %s (mode 0600)\n", pki.rootPasswordFile)
		fmt.Fprintf(a.Stdout(), "  add users and roles with dkv user add / dkv role grant-permission (docs/security.md)\n")
		fmt.Fprintf(a.Stdout(), "  https://%s/livez with curl --cacert %s --cert %s --key %s\n", ms[0].http, pki.caFile, pki.clientCert, pki.clientKey)
		fmt.Fprintf(a.Stdout(), "try:  dkv --endpoints %s %s put hello world\n", strings.Join(eps, ","), pki.clientFlags())
		fmt.Fprintf(a.Stdout(), "or:   export DKV_ENDPOINTS=%s DKV_CACERT=%s DKV_CERT=%s DKV_KEY=%s\n      dkv put hello world && dkv get hello && dkv member list\nCtrl-C stops the cluster.\n%s\n",
			strings.Join(eps, ","), pki.caFile, pki.clientCert, pki.clientKey, devClusterHelp)
	}
	outMu.Unlock()
	if pki != nil {
		go func() {
			if err := awaitSecureCluster(ctx, pki, eps); err != nil {
				if ctx.Err() == nil {
					say("--secure: %v", err)
				}
				return
			}
			if ctx.Err() == nil {
				say("secure cluster up")
			}
		}()
	}

	// Commands from stdin; EOF (no terminal, or dev-cluster &) just ends them.
	cmds := make(chan []string)
	go func() {
		sc := bufio.NewScanner(a.Stdin())
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 {
				select {
				case cmds <- f:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	find := func(name string) []*devMember {
		if name == "all" {
			return ms
		}
		for _, m := range ms {
			if m.name == name {
				return []*devMember{m}
			}
		}
		return nil
	}
	// pendingRestart: members to start again once their old process is gone.
	pendingRestart := map[*devMember]bool{}
	running := len(ms)
loop:
	for running > 0 {
		select {
		case <-ctx.Done():
			break loop
		case e := <-exits:
			if e.cmd != e.m.cmd {
				continue // an older process of a restarted member
			}
			e.m.running = false
			running--
			why := "exit status 0"
			if e.err != nil {
				why = e.err.Error()
			}
			if pendingRestart[e.m] {
				delete(pendingRestart, e.m)
				if err := start(e.m); err != nil {
					say("%v", err)
					continue
				}
				running++
				say("%s restarted", e.m.name)
				continue
			}
			say("%s exited: %s; type \"restart %s\" to start it again", e.m.name, why, e.m.name)
		case f := <-cmds:
			if len(f) != 2 && f[0] != "list" && f[0] != "help" {
				say("usage:\n%s", devClusterHelp)
				continue
			}
			switch f[0] {
			case "list":
				for _, m := range ms {
					state := "exited"
					if m.running {
						state = fmt.Sprintf("running (pid %d)", m.cmd.Process.Pid)
					}
					say("%s  client %s  %s", m.name, m.client, state)
				}
				continue
			case "help":
				say("%s", devClusterHelp)
				continue
			}
			if f[0] != "restart" && f[0] != "kill" && f[0] != "stop" {
				say("unknown command %q\n%s", f[0], devClusterHelp)
				continue
			}
			targets := find(f[1])
			if targets == nil {
				say("no member %q (members: n1..n%d, or all)", f[1], len(ms))
				continue
			}
			for _, m := range targets {
				switch f[0] {
				case "restart":
					if !m.running {
						if err := start(m); err != nil {
							say("%v", err)
							continue
						}
						running++
						say("%s started", m.name)
					} else {
						pendingRestart[m] = true
						m.cmd.Process.Signal(syscall.SIGTERM)
					}
				case "kill":
					if m.running {
						m.cmd.Process.Kill()
					}
				case "stop":
					if m.running {
						m.cmd.Process.Signal(syscall.SIGTERM)
					}
				}
			}
		}
	}
	signalAll(syscall.SIGTERM)
	deadline := time.After(10 * time.Second)
	for running > 0 {
		select {
		case e := <-exits:
			if e.cmd == e.m.cmd {
				e.m.running = false
				running--
			}
		case <-deadline:
			signalAll(syscall.SIGKILL)
			return fmt.Errorf("members did not stop within 10s; killed")
		}
	}
	pipes.Wait()
	return nil
}
