//go:build linux

package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

// The test binary doubles as a launcher that runs a program with a low
// open-file limit: with DKV_FDLIMIT_EXEC set it lowers RLIMIT_NOFILE
// (soft and hard: lowering needs no privilege, and as root the hard limit
// must go down too, or the child could raise its soft limit back) and
// execs DKV_FDLIMIT_ARGS. This works wherever the test runs, as root or
// not, without prlimit(1).
func init() {
	lim := os.Getenv("DKV_FDLIMIT_EXEC")
	if lim == "" {
		return
	}
	n, err := strconv.ParseUint(lim, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "DKV_FDLIMIT_EXEC:", err)
		os.Exit(111)
	}
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv("DKV_FDLIMIT_ARGS")), &argv); err != nil || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "DKV_FDLIMIT_ARGS:", err)
		os.Exit(111)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(111)
	}
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "DKV_FDLIMIT_") {
			env = append(env, e)
		}
	}
	err = syscall.Exec(argv[0], argv, env)
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(111)
}

// TestProcessFDExhaustion: a `dkv serve` process
// with RLIMIT_NOFILE 1500 is flooded with more idle TCP connections than
// that on its client, HTTP and peer ports, which never send a byte; all
// the while an existing client writes 48 MiB (enough for Pebble to rotate
// its WAL and flush tables, which needs new descriptors) and reads it
// back, and an existing HTTP client keeps reading. The node must not die,
// every write must succeed, and every acknowledged write must be there.
// Before the fix the idle connections took every descriptor and Pebble
// panicked when it could not open its next WAL.
func TestProcessFDExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	const (
		fdLimit   = 1500
		floodConn = 2000 // idle connections held open, over fdLimit
	)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 2*floodConn {
		t.Fatalf("this test opens %d connections itself and needs RLIMIT_NOFILE >= %d; it is %d (err %v)", floodConn, 2*floodConn, rl.Cur, err)
	}
	bin := testutil.DKVBinary(t)
	base := t.TempDir()
	clientAddr, httpAddr, peerAddr := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
	args, _ := json.Marshal([]string{bin, "serve", "--name", "fd", "--data-dir", filepath.Join(base, "data"),
		"--client-addr", clientAddr, "--http-addr", httpAddr, "--peer-addr", peerAddr})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "DKV_FDLIMIT_EXEC="+strconv.Itoa(fdLimit), "DKV_FDLIMIT_ARGS="+string(args))
	logPath := filepath.Join(base, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	logTail := func() string {
		b, _ := os.ReadFile(logPath)
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		return string(b)
	}
	alive := func(when string) {
		t.Helper()
		select {
		case <-exited:
			t.Fatalf("%s: dkv serve exited (%v); log tail:\n%s", when, cmd.ProcessState, logTail())
		default:
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testutil.Eventually(t, 30*time.Second, "dkv serve ready", func() bool {
		alive("starting")
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	cl, err := client.New(ctx, client.Config{Endpoints: []string{clientAddr}, DialTimeout: 5 * time.Second, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Put(ctx, "pre", []byte("pre")); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	httpGet := func(key string) (string, error) {
		resp, err := hc.Get("http://" + httpAddr + "/v1/keys/" + key)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("GET %s: %d %s", key, resp.StatusCode, b)
		}
		return string(b), err
	}
	if v, err := httpGet("pre"); err != nil || v != "pre" {
		t.Fatalf("HTTP read before the flood: %q, %v", v, err)
	}

	// The flood: idle connections that never send a byte; one the node
	// closes is opened again at once, until the end of the test.
	stop := make(chan struct{})
	var (
		wg     sync.WaitGroup
		opened atomic.Int64
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
	)
	flood := func(addr string) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err != nil {
				select { // the backlog is full: try again soon
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			opened.Add(1)
			io.Copy(io.Discard, c) // (a gRPC server speaks first) until the node or stop closes it
			c.Close()
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}
	}
	for i := 0; i < floodConn; i++ {
		wg.Add(1)
		switch {
		case i%5 == 0:
			go flood(httpAddr)
		case i%5 == 1:
			go flood(peerAddr)
		default:
			go flood(clientAddr)
		}
	}
	stopFlood := func() {
		select {
		case <-stop:
			return
		default:
		}
		close(stop)
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	defer stopFlood()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d idle connections open", floodConn), func() bool {
		return opened.Load() >= floodConn
	})

	// The node's open descriptors, sampled: Pebble's share must stay free.
	maxFDs := 0
	sampleFDs := func() {
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", cmd.Process.Pid)); err == nil {
			maxFDs = max(maxFDs, len(ents))
		}
	}

	// The existing clients keep working while the flood goes on.
	// 96 writes of 512 KiB, then small ones until the node has closed
	// idle connections and the flood has replaced them (the flood goes on
	// for at least one handshake timeout).
	value := func(k string) []byte {
		if k >= "fd/0096" {
			return []byte(k)
		}
		return bytes.Repeat([]byte(k+"."), (512<<10)/(len(k)+1))
	}
	acked := map[string]bool{}
	churned := func() bool { return opened.Load() >= floodConn+400 }
	writeUntil := time.Now().Add(90 * time.Second)
	for i := 0; i < 96 || !churned(); i++ {
		if time.Now().After(writeUntil) {
			t.Fatalf("after 90s, %d writes and %d flood connections (the node should have closed idle ones)", i, opened.Load())
		}
		alive(fmt.Sprintf("write %d", i))
		sampleFDs()
		k := fmt.Sprintf("fd/%04d", i)
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cl.Put(wctx, k, value(k))
		wcancel()
		if err != nil {
			select { // a dead node is the likelier story: say so
			case <-exited:
			case <-time.After(5 * time.Second):
			}
			alive(fmt.Sprintf("write %s failed (%v)", k, err))
			t.Fatalf("existing client: write %s under the flood: %v", k, err)
		}
		acked[k] = true
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		kv, err := cl.Get(rctx, k)
		rcancel()
		if err != nil || kv == nil || !bytes.Equal(kv.Value, value(k)) {
			t.Fatalf("existing client: read %s under the flood: %v", k, err)
		}
		if v, err := httpGet("pre"); err != nil || v != "pre" {
			t.Fatalf("existing HTTP client under the flood: %q, %v", v, err)
		}
	}
	alive("after the writes")
	if n := opened.Load(); n < floodConn {
		t.Fatalf("only %d flood connections were opened", n)
	}
	sampleFDs()
	stopFlood()
	// Pebble's table cache alone may want 1,000 descriptors: connections
	// must leave them free.
	if maxFDs == 0 || maxFDs > fdLimit-1000 {
		t.Errorf("the node held up to %d descriptors of its %d under the flood, leaving fewer than 1000 for Pebble", maxFDs, fdLimit)
	}

	// A new client gets in once the flood is gone, and sees every write.
	var nc *client.Client
	testutil.Eventually(t, 30*time.Second, "a new client after the flood", func() bool {
		alive("after the flood")
		c, err := client.New(ctx, client.Config{Endpoints: []string{clientAddr}, DialTimeout: 2 * time.Second, AutoSyncInterval: -1})
		if err != nil {
			return false
		}
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = c.Get(gctx, "pre")
		gcancel()
		if err != nil {
			c.Close()
			return false
		}
		nc = c
		return true
	})
	defer nc.Close()
	for k := range acked {
		kv, err := nc.Get(ctx, k)
		if err != nil || kv == nil || !bytes.Equal(kv.Value, value(k)) {
			t.Errorf("acknowledged write %s: %v, %v", k, kv != nil, err)
		}
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("dkv serve did not stop within 30s of SIGTERM; log tail:\n%s", logTail())
	}
	if !cmd.ProcessState.Success() || strings.Contains(logTail(), "panic") {
		t.Fatalf("dkv serve ended with %v; log tail:\n%s", cmd.ProcessState, logTail())
	}
	b, _ := os.ReadFile(logPath)
	if bytes.Contains(b, []byte("too many open files")) {
		t.Errorf("the node ran out of descriptors (EMFILE in its log); tail:\n%s", logTail())
	}
	if !bytes.Contains(b, []byte("connection limit reached")) {
		t.Errorf("the log does not say the connection limit was reached; tail:\n%s", logTail())
	}
	t.Logf("the node held at most %d descriptors; %d flood connections were opened", maxFDs, opened.Load())
}
