package servercmd_test

import (
	"fmt"
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
