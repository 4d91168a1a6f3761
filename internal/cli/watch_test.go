package cli_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// startWatch runs `dkv watch args...` against n and returns its stdout
// lines as they come.
func startWatch(t *testing.T, n *clitest.Node, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(clitest.Bin, append([]string{"watch"}, args...)...)
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

func expectLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	select {
	case l := <-lines:
		if l != want {
			t.Fatalf("dkv watch printed %q, want %q", l, want)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("dkv watch printed nothing; want %q", want)
	}
}

func TestCLIWatch(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	n.OK("", "put", "jobs/1", "resize")
	n.OK("", "put", "jobs/2", "email")
	n.OK("", "put", "other", "x")

	cmd, lines := startWatch(t, n, "jobs/", "--prefix", "--snapshot", "--prev")
	expectLine(t, lines, "PUT jobs/1 resize")
	expectLine(t, lines, "PUT jobs/2 email")
	n.OK("", "del", "jobs/1")
	expectLine(t, lines, "DELETE jobs/1 (prev: resize)")
	n.OK("", "put", "jobs/3", "report")
	expectLine(t, lines, "PUT jobs/3 report")
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dkv watch after SIGINT: %v, want exit 0", err)
	}

	// JSON, from a past revision: replays history.
	_, jl := startWatch(t, n, "-o", "json", "jobs/3", "--rev", "1")
	select {
	case l := <-jl:
		var ev struct {
			Type     string `json:"type"`
			Revision int64  `json:"revision"`
			Key      string `json:"key"`
			KV       struct {
				Value string `json:"value"`
			} `json:"kv"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Type != "PUT" || ev.Key != "jobs/3" || ev.KV.Value != "report" || ev.Revision == 0 {
			t.Fatalf("json line %q (%v)", l, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no json line")
	}

	// A compacted start revision: exit 8.
	n.OK("", "put", "jobs/4", "x") // revision 6
	n.OK("", "compact", "5")
	n.Fails(8, "Error: Compacted:", "watch", "jobs/", "--prefix", "--rev", "2")
}
