package servercmd_test

import (
	"bufio"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
	"github.com/dkv-io/dkv/internal/tlsutil"
)

// dkv serve with TLS says so, re-reads its certificate on SIGHUP (the new
// one is served to the next connection), and keeps the last good one
// when the file on disk is broken, saying why.
func TestServeTLSReloadOnSIGHUP(t *testing.T) {
	ca, err := tlsutil.NewCA("test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, cf, kf := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "n.crt"), filepath.Join(dir, "n.key")
	if err := ca.WriteCert(caFile); err != nil {
		t.Fatal(err)
	}
	issue := func() string {
		c, err := ca.Issue("n1", []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteFiles(cf, kf); err != nil {
			t.Fatal(err)
		}
		return c.Cert.SerialNumber.String()
	}
	first := issue()
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(clitest.Bin, "serve", "--data-dir", filepath.Join(dir, "data"),
		"--client-addr", "127.0.0.1:0", "--http-addr", "", "--peer-addr", "",
		"--cert-file", cf, "--key-file", kf)
	cmd.Stderr = logf
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("serve stderr:\n%s", clitest.Tail(string(b), 3000))
		}
	})
	var addr, tlsLine string
	for addr == "" || tlsLine == "" {
		select {
		case l := <-lines:
			if a, ok := strings.CutPrefix(strings.TrimSpace(l), "client gRPC:"); ok {
				addr = strings.TrimSpace(a)
			}
			if a, ok := strings.CutPrefix(strings.TrimSpace(l), "TLS:"); ok {
				tlsLine = strings.TrimSpace(a)
			}
		case <-exited:
			t.Fatal("dkv serve exited")
		case <-time.After(30 * time.Second):
			t.Fatalf("dkv serve printed no address and TLS line within 30s (address %q)", addr)
		}
	}
	if tlsLine != "client gRPC and HTTPS" {
		t.Errorf("TLS line %q", tlsLine)
	}
	served := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got := served(); got != first {
		t.Fatalf("serving %s, want %s", got, first)
	}
	// waitLog waits for the n-th log line containing want.
	waitLog := func(want string, n int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			b, _ := os.ReadFile(logPath)
			if strings.Count(string(b), want) >= n {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("serve did not log %q (%d times) within 30s", want, n)
	}
	second := issue()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("SIGHUP: TLS certificates re-read", 1)
	if got := served(); got != second {
		t.Errorf("after SIGHUP serving %s, want the new %s", got, second)
	}
	if err := os.WriteFile(cf, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("SIGHUP: re-reading the TLS certificates failed; the previous ones stay in use", 1)
	if got := served(); got != second {
		t.Errorf("with a broken certificate file serving %s, want the last good %s", got, second)
	}
	n := &clitest.Node{T: t, Addr: addr}
	if r := n.DKV("", "--cacert", caFile, "put", "k", "v"); r.Code != 0 {
		t.Errorf("put over TLS after the reloads: exit %d %s", r.Code, r.Stderr)
	}
}
