package servercmd_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// serveFails runs dkv serve with args, which must fail: within a bound
// (a hang detector: these failures are immediate), with code, with want
// in stderr, and without a panic or goroutine dump.
func serveFails(t *testing.T, code int, want string, args ...string) string {
	t.Helper()
	cmd := exec.Command(clitest.Bin, append([]string{"serve"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("dkv serve %q still running after 10s; stdout %q stderr %q", args, out.String(), errb.String())
	}
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	}
	stderr := errb.String()
	if got != code || !strings.Contains(stderr, want) {
		t.Fatalf("dkv serve %q: exit %d, stderr %q; want exit %d and %q", args, got, stderr, code, want)
	}
	for _, bad := range []string{"panic", "goroutine "} {
		if strings.Contains(stderr, bad) {
			t.Fatalf("dkv serve %q: stderr has %q:\n%s", args, bad, stderr)
		}
	}
	return stderr
}

func TestServeStartupFailures(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ports := func(dir string) []string {
		return []string{"--data-dir", dir, "--client-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	}
	t.Run("peer port in use", func(t *testing.T) {
		serveFails(t, 1, "peer listener on "+busy.Addr().String()+": listen tcp "+busy.Addr().String()+": bind: address already in use",
			append(ports(t.TempDir()), "--peer-addr", busy.Addr().String())...)
	})
	t.Run("client port in use", func(t *testing.T) {
		serveFails(t, 1, "client listener on "+busy.Addr().String(),
			"--data-dir", t.TempDir(), "--client-addr", busy.Addr().String(), "--http-addr", "", "--peer-addr", "127.0.0.1:0")
	})
	t.Run("initial cluster without this member", func(t *testing.T) {
		p := testutil.FreeAddr(t)
		serveFails(t, 2, `initial cluster "n2=`+p+`" does not contain this member's name "n1"`,
			append(ports(t.TempDir()), "--name", "n1", "--peer-addr", p, "--initial-cluster", "n2="+p)...)
	})
	t.Run("malformed initial cluster", func(t *testing.T) {
		serveFails(t, 2, `initial cluster entry "n1" is not name=host:port`,
			append(ports(t.TempDir()), "--name", "n1", "--peer-addr", "127.0.0.1:0", "--initial-cluster", "n1")...)
		serveFails(t, 2, `peer address "nohostport" is not host:port`,
			append(ports(t.TempDir()), "--name", "n1", "--peer-addr", "127.0.0.1:0", "--initial-cluster", "n1=nohostport")...)
	})
	t.Run("peer addr differs from initial cluster", func(t *testing.T) {
		p, q := testutil.FreeAddr(t), testutil.FreeAddr(t)
		serveFails(t, 2, "this member's entry in --initial-cluster is n1="+p+", but it advertises peer address "+q,
			append(ports(t.TempDir()), "--name", "n1", "--peer-addr", q, "--initial-cluster", "n1="+p+",n2="+testutil.FreeAddr(t))...)
	})
	t.Run("join refused", func(t *testing.T) {
		ep := testutil.FreeAddr(t) // nothing listens there
		serveFails(t, 1, "joining the cluster failed: via "+ep+": Unavailable",
			append(ports(t.TempDir()), "--name", "n4", "--peer-addr", "127.0.0.1:0", "--join", ep, "--initial-cluster-token", "t")...)
	})
	// Issue #32, finding 2: a peer secret anybody can derive is no secret.
	t.Run("multi-node bootstrap without a peer secret", func(t *testing.T) {
		p := testutil.FreeAddr(t)
		r := serveFails(t, 2, "no peer secret: a member of a multi-node cluster needs --initial-cluster-token",
			append(ports(t.TempDir()), "--name", "n1", "--peer-addr", p, "--initial-cluster", "n1="+p+",n2="+testutil.FreeAddr(t))...)
		for _, flag := range []string{"--peer-secret-file", "--peer-cert-file", "--insecure-peer"} {
			if !strings.Contains(r, flag) {
				t.Errorf("the refusal does not name %s: %s", flag, r)
			}
		}
	})
	t.Run("join without a peer secret", func(t *testing.T) {
		serveFails(t, 2, "no peer secret: a member of a multi-node cluster needs --initial-cluster-token",
			append(ports(t.TempDir()), "--name", "n4", "--peer-addr", "127.0.0.1:0", "--join", testutil.FreeAddr(t))...)
	})
	t.Run("token and secret file", func(t *testing.T) {
		serveFails(t, 2, "give --initial-cluster-token or --peer-secret-file, not both",
			append(ports(t.TempDir()), "--initial-cluster-token", "t", "--peer-secret-file", "x")...)
	})
	t.Run("weak secret file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(f, []byte("password\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		serveFails(t, 2, "peer secret file "+f+" must hold at least 16 random bytes in hex (generate one with: openssl rand -hex 32)",
			append(ports(t.TempDir()), "--peer-secret-file", f)...)
	})
	t.Run("data dir in use", func(t *testing.T) {
		dir := t.TempDir()
		n := clitest.StartServe(t, dir)
		serveFails(t, 1, "data dir "+dir+" is in use by another dkv process (pid "+strconv.Itoa(n.Cmd.Process.Pid)+")",
			"--data-dir", dir, "--client-addr", "127.0.0.1:0", "--http-addr", "", "--peer-addr", "")
	})
}

// A client address of 0.0.0.0 is advertised as is only with a warning
// naming --advertise-client-addr; port 0 advertises the bound port, and
// --advertise-client-addr is what `member list` shows.
func TestServeAdvertisedAddresses(t *testing.T) {
	t.Run("bound port", func(t *testing.T) {
		n := clitest.StartServe(t, t.TempDir())
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := n.DKV("", "member", "list")
			if strings.Contains(r.Stdout, n.Addr) {
				break
			}
			if strings.Contains(r.Stdout, ":0 ") || time.Now().After(deadline) {
				t.Fatalf("member list %q does not show the bound client address %s", r.Stdout, n.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("unspecified", func(t *testing.T) {
		dir := t.TempDir()
		logPath := filepath.Join(dir, "serve.log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(clitest.Bin, "serve", "--data-dir", filepath.Join(dir, "d"), "--client-addr", "0.0.0.0:0", "--http-addr", "", "--peer-addr", "")
		cmd.Stderr = logf
		var out clitest.LockedBuffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		deadline := time.Now().Add(20 * time.Second)
		for {
			b, _ := os.ReadFile(logPath)
			if s := string(b); strings.Contains(s, "advertised client address") && strings.Contains(s, "is unspecified") && strings.Contains(s, "set --advertise-client-addr") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no warning about the unspecified advertised address; stderr:\n%s", b)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("explicit", func(t *testing.T) {
		n := clitest.StartServe(t, t.TempDir(), "--advertise-client-addr", "dkv-1.example:7861")
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := n.DKV("", "member", "list", "-o", "json")
			if strings.Contains(r.Stdout, `"client_url":"dkv-1.example:7861"`) || strings.Contains(r.Stdout, `"client_url": "dkv-1.example:7861"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member list %q does not show the advertised client address", r.Stdout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// member add adds a learner unless --voter, and --voter warns that a
// voter nobody runs counts in the quorum.
func TestMemberAddLearnerByDefault(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	p2, p3 := testutil.FreeAddr(t), testutil.FreeAddr(t)
	if got := n.OK("", "member", "add", "n2", p2); !strings.HasPrefix(got, "added n2 (") || !strings.Contains(got, "as a learner") {
		t.Fatalf("member add printed %q, want it added as a learner", got)
	}
	list := n.OK("", "member", "list")
	if !strings.Contains(list, p2) || !strings.Contains(list, "learner") {
		t.Fatalf("member list after add:\n%s", list)
	}
	n.Fails(2, "Error: usage: give --learner or --voter, not both", "member", "add", "n3", p3, "--learner", "--voter")
	r := n.DKV("", "member", "add", "n3", p3, "--voter")
	if r.Code != 0 || !strings.Contains(r.Stdout, "as a voter") ||
		!strings.Contains(r.Stderr, "warning: n3 is a voter from now on") || !strings.Contains(r.Stderr, "2 of 2 voters needed") {
		t.Fatalf("member add --voter: %+v, want a voter and a warning naming the quorum", r)
	}
}
