package cli_test

import (
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
	n.Fails(2, `Error: usage: --http-allowed-hosts: "http://x.example" is not a host name`, "proxy", "--http-allowed-hosts", "http://x.example")

	cmd, lines := startDKV(t, n, "proxy", "--listen-addr", "127.0.0.1:0", "--http-addr", "")
	var addr string
	select {
	case l, ok := <-lines:
		a, found := strings.CutPrefix(l, "proxy listening on ")
		if !ok || !found {
			t.Fatalf("dkv proxy printed %q (open %v), want its address", l, ok)
		}
		addr = strings.TrimSuffix(strings.Fields(a)[0], ";")
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
	timeout := time.After(30 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-lines:
		case <-timeout:
			t.Fatal("dkv proxy did not stop within 30s of SIGTERM")
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("dkv proxy after SIGTERM: %v, want exit 0", err)
	}
}
