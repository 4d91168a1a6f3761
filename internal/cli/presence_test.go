package cli_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// startDKV runs `dkv args...` against n in the background and returns
// its stdout lines as they come.
func startDKV(t *testing.T, n *clitest.Node, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(clitest.Bin, args...)
	cmd.Env = append(os.Environ(), "DKV_ENDPOINTS="+n.Addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, lines
}

// The presence commands: a registered dkv is listed and watched; when it
// is interrupted it deregisters and the watcher prints the leave.
func TestCLIPresence(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	reg, rl := startDKV(t, n, "presence", "register", "api", "i1", "10.0.0.1:80", "--ttl", "5s")
	if l := <-rl; !strings.HasPrefix(l, "registered api i1 lease=") {
		t.Fatalf("register printed %q", l)
	}
	if got := n.OK("", "presence", "list", "api"); got != "i1 10.0.0.1:80\n" {
		t.Fatalf("list printed %q", got)
	}
	n.Fails(4, "Error: Conflict:", "presence", "register", "api", "i1", "other")
	_, wl := startDKV(t, n, "presence", "watch", "api")
	expectLine(t, wl, "member i1 10.0.0.1:80")
	_, rl2 := startDKV(t, n, "presence", "register", "api", "i2", "10.0.0.2:80")
	<-rl2
	expectLine(t, wl, "join i2 10.0.0.2:80")
	reg.Process.Signal(syscall.SIGINT)
	if err := reg.Wait(); err != nil {
		t.Fatalf("register after SIGINT: %v, want exit 0", err)
	}
	expectLine(t, wl, "leave i1 10.0.0.1:80")
	if got := n.OK("", "presence", "list", "api"); got != "i2 10.0.0.2:80\n" {
		t.Fatalf("list after the leave printed %q", got)
	}
	if got := n.OK("", "-o", "json", "presence", "list", "api"); !strings.Contains(got, `"id":"i2"`) || !strings.Contains(got, `"metadata":"10.0.0.2:80"`) {
		t.Fatalf("list -o json printed %q", got)
	}
	n.Fails(6, "Error: InvalidInput:", "presence", "list", "a/b")
}
