package cli_test

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// TestCLIProxy: dkv proxy forwards client commands to --endpoints and
// stops cleanly on SIGTERM; bad TLS flags are usage errors.
func TestCLIProxy(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	n.Fails(2, "Error: usage: --cert-file and --key-file go together", "proxy", "--cert-file", "x.pem")
	n.Fails(2, "Error: usage: --client-cert-auth needs --trusted-ca-file", "proxy", "--cert-file", "x.pem", "--key-file", "x.key", "--client-cert-auth")

	cmd := exec.Command(clitest.Bin, "--endpoints", n.Addr, "proxy", "--listen-addr", "127.0.0.1:0", "--http-addr", "")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "proxy listening on "); ok {
				addrc <- strings.TrimSuffix(strings.Fields(a)[0], ";")
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	var addr string
	select {
	case addr = <-addrc:
	case err := <-exited:
		t.Fatalf("dkv proxy exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("dkv proxy printed no address within 30s")
	}
	p := &clitest.Node{T: t, Addr: addr}
	p.OK("", "put", "through", "proxy")
	if got := strings.TrimSpace(n.OK("", "get", "through")); got != "proxy" {
		t.Errorf("get through the member: %q, want the value put through the proxy", got)
	}
	if got := strings.TrimSpace(p.OK("", "get", "through")); got != "proxy" {
		t.Errorf("get through the proxy: %q", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("dkv proxy after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("dkv proxy did not stop within 30s of SIGTERM")
	}
}
