package browser

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
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
)

// member is one dkv process this test started; it is stopped by its pid.
type member struct {
	name, client, peer, http, log string
	cmd                           *exec.Cmd
	exited                        chan struct{}
	waitErr                       error
}

func (m *member) stop() {
	select {
	case <-m.exited:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

type cluster struct{ members []*member }

func (c *cluster) logs() string {
	var b strings.Builder
	for _, m := range c.members {
		data, _ := os.ReadFile(m.log)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "\n%s log:\n  %s", m.name, strings.Join(lines, "\n  "))
	}
	return b.String()
}

// freeAddr returns a free port on a random 127.0.0.x address.
func freeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.%d:%d", 1+rand.IntN(254), 20000+rand.IntN(12000))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatal("no free loopback address")
	return ""
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// dkvBinary builds cmd/dkv from the repository root (two levels up), once.
func dkvBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dkv-browser-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "dkv")
		root, _ := filepath.Abs("../..")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/dkv")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/dkv in %s: %v\n%s", root, err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// startCluster starts three members with HTTP ports and waits until each
// reports the same leader.
func startCluster(t testing.TB, extra ...string) *cluster {
	t.Helper()
	bin := dkvBinary(t)
	base := t.TempDir()
	names := []string{"n1", "n2", "n3"}
	c := &cluster{}
	var initial []string
	for _, n := range names {
		m := &member{name: n, client: freeAddr(t), peer: freeAddr(t), http: freeAddr(t), log: filepath.Join(base, n+".log")}
		c.members = append(c.members, m)
		initial = append(initial, n+"="+m.peer)
	}
	token := fmt.Sprintf("browser-%x", rand.Uint64())
	for i, a := range extra {
		if a == "--cert-file" && i+1 < len(extra) {
			hc := httpsClient(t, extra[i+1])
			for _, m := range c.members {
				tlsClients.Store(m.http, hc)
			}
		}
	}
	for _, m := range c.members {
		args := append([]string{"serve", "--name", m.name, "--data-dir", filepath.Join(base, m.name),
			"--client-addr", m.client, "--peer-addr", m.peer, "--http-addr", m.http,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token}, extra...)
		lf, err := os.Create(m.log)
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(bin, args...)
		m.cmd.Stdout, m.cmd.Stderr = lf, lf
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		m.exited = make(chan struct{})
		go func(m *member, lf *os.File) {
			m.waitErr = m.cmd.Wait()
			lf.Close()
			close(m.exited)
		}(m, lf)
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range c.members {
			wg.Go(m.stop)
		}
		wg.Wait()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.leader(); err == nil {
			return c
		} else if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %v%s", err, c.logs())
		}
		for _, m := range c.members {
			select {
			case <-m.exited:
				t.Fatalf("%s exited: %v%s", m.name, m.waitErr, c.logs())
			default:
			}
		}
		time.Sleep(100 * time.Millisecond) // poll interval, not a synchronisation
	}
}

// leader is the name of the leader every member agrees on.
func (c *cluster) leader() (string, error) {
	var leader string
	for _, m := range c.members {
		var ml struct {
			LeaderID string `json:"leader_id"`
			Members  []struct{ ID, Name string }
		}
		if err := call(context.Background(), m.http, "GET", "/v1/cluster/members", nil, &ml); err != nil {
			return "", err
		}
		name := ""
		for _, x := range ml.Members {
			if x.ID == ml.LeaderID {
				name = x.Name
			}
		}
		if name == "" || (leader != "" && name != leader) {
			return "", fmt.Errorf("%s: no agreed leader yet", m.name)
		}
		leader = name
	}
	return leader, nil
}

var httpc = &http.Client{Timeout: 60 * time.Second}

// tlsClients holds the HTTPS client of each member started with
// --cert-file, by HTTP address; call uses it.
var tlsClients sync.Map

// httpsClient trusts the self-signed certificate in certFile.
func httpsClient(t testing.TB, certFile string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", certFile)
	}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// call sends a JSON request to the member's HTTP API and decodes the answer.
func call(ctx context.Context, addr, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	scheme, hc := "http", httpc
	if v, ok := tlsClients.Load(addr); ok {
		scheme, hc = "https", v.(*http.Client)
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+addr+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json") // the HTTP port takes no other JSON (docs/security.md)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
