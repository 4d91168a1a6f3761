package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
)

// cliMember is one `dkv serve` process of a multi-member cluster.
type cliMember struct {
	name, addr string
	cmd        *exec.Cmd
	exited     chan struct{}
}

func (m *cliMember) kill() {
	m.cmd.Process.Kill()
	<-m.exited
}

// startCLICluster runs an n-member cluster and waits until every member
// knows the leader.
func startCLICluster(t *testing.T, n int) []*cliMember {
	t.Helper()
	base := t.TempDir()
	var ms []*cliMember
	var initial []string
	peers := make([]string, n)
	token := servertest.RandomToken()
	for i := range n {
		peers[i] = testutil.FreeAddr(t)
		ms = append(ms, &cliMember{name: fmt.Sprintf("m%d", i+1), addr: testutil.FreeAddr(t)})
		initial = append(initial, ms[i].name+"="+peers[i])
	}
	for i, m := range ms {
		logf, err := os.Create(filepath.Join(base, m.name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(clitest.Bin, "serve", "--name", m.name, "--client-addr", m.addr, "--peer-addr", peers[i],
			"--http-addr", "", "--data-dir", filepath.Join(base, m.name), "--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", token)
		m.cmd.Stdout, m.cmd.Stderr = logf, logf
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		m.exited = make(chan struct{})
		go func() { m.cmd.Wait(); logf.Close(); close(m.exited) }()
		t.Cleanup(m.kill)
	}
	for _, m := range ms {
		testutil.Eventually(t, 30*time.Second, m.name+" knows the leader", func() bool {
			st, r := statusOf(t, "--endpoints", m.addr)
			return r.Code == 0 && st.LeaderID != "0" && st.LeaderID != ""
		})
	}
	return ms
}

type cliStatus struct {
	Name     string `json:"name"`
	MemberID string `json:"member_id"`
	LeaderID string `json:"leader_id"`
}

// statusOf runs `dkv -o json status` with args.
func statusOf(t *testing.T, args ...string) (cliStatus, clitest.Result) {
	t.Helper()
	r := runDKV(t, 30*time.Second, append([]string{"-o", "json", "status"}, args...)...)
	var st cliStatus
	if r.Code == 0 {
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
			t.Fatalf("status printed %q: %v", r.Stdout, err)
		}
	}
	return st, r
}

// runDKV runs the CLI with args (no DKV_ENDPOINTS); the process is killed,
// failing the test, if it is still running after limit.
func runDKV(t *testing.T, limit time.Duration, args ...string) clitest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, clitest.Bin, args...)
	cmd.Env = append(os.Environ(), "DKV_ENDPOINTS=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("dkv %q still running after %v (stderr %q)", args, limit, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running dkv %q: %v", args, err)
	}
	return clitest.Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// `--endpoints X` talks to member X: per-member commands answer from
// the member named, every time, with or without --discover.
func TestCLIEndpointsAddressTheNamedMember(t *testing.T) {
	ms := startCLICluster(t, 3)
	for _, m := range ms {
		for _, extra := range [][]string{nil, {"--discover"}} {
			for i := range 6 {
				st, r := statusOf(t, append([]string{"--endpoints", m.addr}, extra...)...)
				if r.Code != 0 {
					t.Fatalf("status %v: exit %d, stderr %q", extra, r.Code, r.Stderr)
				}
				if st.Name != m.name {
					t.Fatalf("status --endpoints %s %v (try %d) answered from %s, not %s", m.addr, extra, i+1, st.Name, m.name)
				}
			}
		}
	}
	// Several endpoints still fail over: with one of them dead, commands
	// keep working through the others.
	gone, _ := statusOf(t, "--endpoints", ms[0].addr)
	ms[0].kill()
	// If ms[0] led, a write sent before the others elect a leader may end
	// with an honest unknown outcome (exit 7): wait for the new leader.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, r := statusOf(t, "--endpoints", ms[1].addr)
		if r.Code == 0 && st.LeaderID != "" && st.LeaderID != "0" && st.LeaderID != gone.MemberID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader among the two live members within 20s (last status %+v, %+v)", st, r)
		}
		time.Sleep(50 * time.Millisecond) // polling the CLI, a process per try
	}
	all := ms[0].addr + "," + ms[1].addr + "," + ms[2].addr
	for i := range 4 {
		k := fmt.Sprintf("fo%d", i)
		if r := runDKV(t, 30*time.Second, "--endpoints", all, "--timeout", "10s", "put", k, "v"); r.Code != 0 {
			t.Fatalf("put with a dead endpoint listed: exit %d, stderr %q", r.Code, r.Stderr)
		}
		if r := runDKV(t, 30*time.Second, "--endpoints", all, "--timeout", "10s", "get", k); r.Code != 0 || r.Stdout != "v\n" {
			t.Fatalf("get with a dead endpoint listed: %+v", r)
		}
	}
}

// With one member of three up, commands that need no quorum answer at
// once: no member-list call goes before them, and `member list` has
// --serializable.
func TestCLIOneMemberUpServesSerializable(t *testing.T) {
	ms := startCLICluster(t, 3)
	live := ms[0]
	if r := runDKV(t, 30*time.Second, "--endpoints", live.addr, "put", "k", "v"); r.Code != 0 {
		t.Fatalf("put: %+v", r)
	}
	// Wait until the live member has applied the put itself.
	testutil.Eventually(t, 10*time.Second, "the put applied on "+live.name, func() bool {
		r := runDKV(t, 30*time.Second, "--endpoints", live.addr, "get", "k", "--serializable")
		return r.Code == 0 && r.Stdout == "v\n"
	})
	ms[1].kill()
	ms[2].kill()
	// A --timeout shorter than the old blocking member-list call (2 s)
	// is enough for commands that need no quorum.
	for _, extra := range [][]string{nil, {"--discover"}} {
		base := append([]string{"--endpoints", live.addr, "--timeout", "1500ms"}, extra...)
		if r := runDKV(t, 30*time.Second, append(base, "get", "k", "--serializable")...); r.Code != 0 || r.Stdout != "v\n" {
			t.Fatalf("get --serializable %v with 1 of 3 up: %+v", extra, r)
		}
		if r := runDKV(t, 30*time.Second, append(base, "status")...); r.Code != 0 {
			t.Fatalf("status %v with 1 of 3 up: %+v", extra, r)
		}
		r := runDKV(t, 30*time.Second, append(base, "-o", "json", "member", "list", "--serializable")...)
		if r.Code != 0 || strings.Count(r.Stdout, `"name":`) != 3 {
			t.Fatalf("member list --serializable %v with 1 of 3 up: %+v", extra, r)
		}
	}
	// The linearizable member list needs a quorum: it fails, as
	// Unavailable.
	if r := runDKV(t, 30*time.Second, "--endpoints", live.addr, "--timeout", "1500ms", "member", "list"); r.Code != 7 {
		t.Fatalf("member list with 1 of 3 up: %+v, want exit 7", r)
	}
}

// An endpoint that cannot be reached fails at once with its cause; a
// malformed one is a usage error; http:// is accepted.
func TestCLIUnreachableAndMalformedEndpoints(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	// --timeout is far longer than the test allows the command: it must
	// not wait for it.
	for _, c := range []struct {
		endpoints string
		want      string
	}{
		{dead, "connection refused"},
		{"http://" + dead, "connection refused"},
		{"nosuch.invalid:7861", "lookup nosuch.invalid"},
	} {
		r := runDKV(t, 30*time.Second, "--endpoints", c.endpoints, "--timeout", "2m", "get", "x")
		if r.Code != 7 || !strings.HasPrefix(r.Stderr, "Error: Unavailable: ") || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("get --endpoints %s: exit %d stderr %q; want exit 7 naming %q", c.endpoints, r.Code, r.Stderr, c.want)
		}
	}
	for _, c := range []struct {
		endpoints string
		want      string
	}{
		{"localhost", "missing port"},
		{"127.0.0.1:", "port"},
		{"https://127.0.0.1:7861", "TLS"},
		{"grpc://127.0.0.1:7861", "scheme"},
	} {
		r := runDKV(t, 30*time.Second, "--endpoints", c.endpoints, "get", "x")
		if r.Code != 2 || !strings.HasPrefix(r.Stderr, "Error: usage: --endpoints: ") || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("get --endpoints %s: exit %d stderr %q; want a usage error naming %q", c.endpoints, r.Code, r.Stderr, c.want)
		}
	}
	n := clitest.StartServe(t, t.TempDir())
	if r := runDKV(t, 30*time.Second, "--endpoints", "http://"+n.Addr+"/", "put", "k", "v"); r.Code != 0 {
		t.Fatalf("put --endpoints http://%s/: %+v", n.Addr, r)
	}
}

// member list asked of a follower shows every member's reachability as
// the leader sees it, also with auth on (the leader is asked with the
// same credentials); no member is "unknown" with a last contact of
// "never".
func TestCLIMemberListFromFollowerWithAuth(t *testing.T) {
	ms := startCLICluster(t, 3)
	any := []string{"--endpoints", ms[0].addr}
	for _, args := range [][]string{
		{"user", "add", "root", "--password", "rootpw"},
		{"user", "grant-role", "root", "root"},
		{"auth", "enable"},
	} {
		if r := runDKV(t, 30*time.Second, append(any, args...)...); r.Code != 0 {
			t.Fatalf("dkv %q: exit %d %s", args, r.Code, r.Stderr)
		}
	}
	auth := []string{"--user", "root:rootpw", "--timeout", "30s"}
	st, r := statusOf(t, append(auth, "--endpoints", ms[0].addr)...)
	if r.Code != 0 {
		t.Fatalf("status: %s", r.Stderr)
	}
	for _, m := range ms {
		if st2, _ := statusOf(t, append(auth, "--endpoints", m.addr)...); st2.MemberID == st.LeaderID {
			continue
		}
		testutil.Eventually(t, 30*time.Second, "every member reachable in "+m.name+"'s member list", func() bool {
			r := runDKV(t, 30*time.Second, append(auth, "--endpoints", m.addr, "member", "list")...)
			if r.Code != 0 || strings.Contains(r.Stdout, "unknown") || strings.Contains(r.Stdout, "never") {
				t.Logf("member list from follower %s: exit %d\n%s%s", m.name, r.Code, r.Stdout, r.Stderr)
				return false
			}
			return strings.Count(r.Stdout, "reachable") == 2 && strings.Contains(r.Stdout, "self")
		})
	}
}
