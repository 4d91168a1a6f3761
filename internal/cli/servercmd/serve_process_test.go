package servercmd_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// SIGTERM stops dkv serve cleanly, with exit status 0.
func TestServeStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	n := clitest.StartServe(t, dir)
	n.OK("", "put", "k", "v")
	if err := n.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("dkv serve still running 30s after SIGTERM")
	}
	if n.ExitErr != nil {
		t.Fatalf("dkv serve exited with %v after SIGTERM", n.ExitErr)
	}
	if !strings.Contains(n.Stdout.String(), "stopped") {
		t.Fatalf("no clean-stop message in %q", n.Stdout)
	}
	n2 := clitest.StartServe(t, dir)
	if got := n2.OK("", "get", "k"); got != "v\n" {
		t.Fatalf("after restart get printed %q", got)
	}
}

// Every put acknowledged before kill -9 is there after a restart.
func TestKill9KeepsAcknowledgedPuts(t *testing.T) {
	dir := t.TempDir()
	n := clitest.StartServe(t, dir)

	const writers = 4
	var (
		mu    sync.Mutex
		acked = map[string]string{}
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		// enough is closed once 40 puts are acknowledged.
		enough     = make(chan struct{})
		enoughOnce sync.Once
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("k/%d/%d", w, i), fmt.Sprintf("v%d-%d", w, i)
				if r := n.DKV("", "--timeout", "2s", "put", k, v); r.Code == 0 {
					mu.Lock()
					acked[k] = v
					if len(acked) >= 40 {
						enoughOnce.Do(func() { close(enough) })
					}
					mu.Unlock()
				} else {
					return // the server is gone
				}
			}
		}()
	}
	// Kill once enough puts are acknowledged, while writers are mid-flight.
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
		t.Fatal("fewer than 40 puts acknowledged in 60s")
	}
	if err := n.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.Exited
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()

	n2 := clitest.StartServe(t, dir)
	out := n2.OK("", "-o", "json", "get", "k/", "--prefix", "--count")
	var count int
	if _, err := fmt.Sscanf(out, `{"revision":%d,"count":%d`, new(int64), &count); err != nil {
		t.Fatalf("count output %q: %v", out, err)
	}
	if count < len(acked) {
		t.Fatalf("%d keys after restart, %d were acknowledged", count, len(acked))
	}
	listing := n2.OK("", "get", "k/", "--prefix")
	lines := strings.Split(strings.TrimSuffix(listing, "\n"), "\n")
	got := map[string]string{}
	for i := 0; i+1 < len(lines); i += 2 {
		got[lines[i]] = lines[i+1]
	}
	for k, v := range acked {
		if got[k] != v {
			t.Errorf("acknowledged put %s=%s lost after kill -9 (read %q)", k, v, got[k])
		}
	}
	t.Logf("%d acknowledged puts survived kill -9", len(acked))
}

// dkv serve runs its garbage collector at GOGC=200 unless the operator
// set GOGC, as /metrics shows.
func TestServeGCPercent(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "go_gc_gogc_percent 200\n"},
		{[]string{"GOGC=50"}, "go_gc_gogc_percent 50\n"},
	} {
		n := clitest.StartServeEnv(t, t.TempDir(), c.env, "--http-addr", "127.0.0.1:0")
		var httpAddr string
		for _, line := range strings.Split(n.Stdout.String(), "\n") {
			if a, ok := strings.CutPrefix(strings.TrimSpace(line), "HTTP:"); ok {
				httpAddr = strings.Fields(a)[0]
			}
		}
		if httpAddr == "" {
			t.Fatalf("no HTTP address in the output:\n%s", n.Stdout)
		}
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), c.want) {
			t.Errorf("with %v in the environment /metrics lacks %q", c.env, c.want)
		}
		n.Kill()
	}
}
