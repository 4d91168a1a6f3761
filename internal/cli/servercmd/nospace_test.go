package servercmd_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, or skips:
// it needs root (CI and the dev machine run as root).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED, not passed: mounting a small tmpfs to fill needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, not passed: cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// serveProc starts dkv serve on dataDir with the given extra flags and
// returns it with its client address ("" if it exited first) and a channel
// closed when it exits.
func serveProc(t *testing.T, dataDir string, extra ...string) (cmd *exec.Cmd, addr string, exited chan struct{}, stderr *clitest.LockedBuffer) {
	t.Helper()
	args := append([]string{"serve", "--data-dir", dataDir, "--client-addr", "127.0.0.1:0", "--http-addr", "", "--peer-addr", ""}, extra...)
	cmd = exec.Command(clitest.Bin, args...)
	stderr = &clitest.LockedBuffer{}
	cmd.Stderr = stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "client gRPC:"); ok {
				addrc <- strings.TrimSpace(a)
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	select {
	case addr = <-addrc:
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("dkv serve neither listened nor exited within 20s; stderr:\n%s", clitest.Tail(stderr.String(), 2000))
	}
	return cmd, addr, exited, stderr
}

func runDKVAt(addr string, args ...string) (int, string) {
	return runDKVAtIn(addr, "", args...)
}

func runDKVAtIn(addr, stdin string, args ...string) (int, string) {
	cmd := exec.Command(clitest.Bin, append([]string{"--endpoints", addr, "--timeout", "5s"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		return -1, err.Error()
	}
	return 0, string(out)
}

// On a small real filesystem: filling it makes writes exit 10 (NoSpace)
// while the node stays up and reads work; restarted on a disk with no
// space left the node exits at once with exit 10 and a clear message
// (it used to panic on ENOSPC, then hang at start, spin and ignore
// SIGTERM); once space is freed it starts with every acknowledged write.
func TestServeOnFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "24m")
	data := filepath.Join(mnt, "data")
	// Space another program holds from the start and the operator frees
	// at the end with the filler. Freeing only the filler is not always
	// enough: writes refused at the reserve do not stop the node's own
	// flush at shutdown from taking part of it, and the restart needs the
	// whole reserve again (how much it took depends on how many puts got
	// in before the refusal, which varies from run to run).
	spare := filepath.Join(mnt, "spare")
	if err := os.WriteFile(spare, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--space-reserve-bytes", "4000000", "--ballast-bytes", "1000000"}
	cmd, addr, exited, stderr := serveProc(t, data, flags...)
	if addr == "" {
		t.Fatalf("serve exited at start:\n%s", stderr)
	}
	val := strings.Repeat("v", 900_000)
	var acked []string
	var code int
	var out string
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; time.Now().Before(deadline) && i < 1000; i++ {
		k := fmt.Sprintf("k%04d", i)
		if code, out = runDKVAtIn(addr, val, "put", k, "-"); code != 0 {
			break
		}
		acked = append(acked, k)
	}
	if code != 10 || !strings.HasPrefix(out, "Error: NoSpace:") {
		t.Fatalf("filling the disk: last put exit %d %q, want exit 10 Error: NoSpace (stderr:\n%s)", code, out, clitest.Tail(stderr.String(), 2000))
	}
	if len(acked) == 0 {
		t.Fatal("no put was accepted")
	}
	if c, got := runDKVAt(addr, "get", acked[0]); c != 0 || strings.TrimSpace(got) != val {
		t.Fatalf("get while out of space: exit %d", c)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of SIGTERM")
	}

	// Fill what is left, as another program would.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	start := time.Now()
	cmd, addr, exited, stderr = serveProc(t, data, flags...)
	if addr != "" {
		t.Fatalf("serve started on a full disk (it should exit at once)")
	}
	<-exited
	if c := cmd.ProcessState.ExitCode(); c != 10 {
		t.Errorf("serve on a full disk exited %d, want 10 (NoSpace)", c)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("serve took %v to give up on a full disk", d)
	}
	msg := stderr.String()
	if !strings.Contains(msg, "Error: NoSpace:") || !strings.Contains(msg, "free space") {
		t.Errorf("serve on a full disk said %q, want Error: NoSpace naming what to do", clitest.Tail(msg, 1000))
	}
	if strings.Contains(msg, "panic") || strings.Count(msg, "\n") > 20 {
		t.Errorf("serve on a full disk logged too much or panicked:\n%s", clitest.Tail(msg, 2000))
	}
	os.Remove(filler)
	os.Remove(spare)
	_, addr, _, stderr = serveProc(t, data, flags...)
	if addr == "" {
		t.Fatalf("serve did not start after space was freed:\n%s", stderr)
	}
	for _, k := range acked {
		if c, got := runDKVAt(addr, "get", k); c != 0 || strings.TrimSpace(got) != val {
			t.Fatalf("acknowledged %s after restart: exit %d", k, c)
		}
	}
	ok := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if c, _ := runDKVAt(addr, "put", "after", "x"); c == 0 {
			ok = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !ok {
		t.Fatal("writes did not resume after space was freed")
	}
}
