package tests

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// The peer secret never travels over the
// client API, and a multi-node cluster does not run on a secret anybody
// can compute unless its operator says so.

// serveRefused runs dkv serve with args until it exits or says it is
// listening (it started: then it is killed). It returns the exit code
// (-1 if it started) and the combined output.
func serveRefused(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testutil.DKVBinary(t), args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	var out strings.Builder
	started := false
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), " listening") && !started {
			started = true
			cmd.Process.Kill()
		}
	}
	err := <-exited
	if started {
		return -1, out.String()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String()
	}
	return 0, out.String()
}

// readyz returns m's /readyz status and body once it answers.
func readyz(t *testing.T, m *testutil.Member) (int, string) {
	t.Helper()
	var code int
	var body string
	testutil.Eventually(t, 60*time.Second, m.Name+" /readyz 200", func() bool {
		resp, err := http.Get("http://" + m.HTTPAddr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return code == http.StatusOK
	})
	return code, body
}

func logOf(m *testutil.Member) string {
	b, _ := os.ReadFile(m.Log)
	return string(b)
}

// statusOf is m's Status, asked as a stranger would (no credentials).
func statusOf(t *testing.T, ctx context.Context, conn *grpc.ClientConn) *dkvpb.StatusResponse {
	t.Helper()
	st, err := dkvpb.NewClusterClient(conn).Status(ctx, &dkvpb.StatusRequest{})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

// TestProcessStrangerGetsNoPeerSecret runs the whole attack chain
// against real processes: a stranger asks every member, naming every
// member id, for the peer secret over the client port, then forges a
// MsgApp posing as the leader to a follower's peer port with whatever it
// obtained (or, having nothing, the secret a token-less cluster would
// derive from --initial-cluster). Nothing may leak, the forged key must
// not be written anywhere, and the leader must live.
func TestProcessStrangerGetsNoPeerSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ms := startProcCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitProcCluster(t, ms)
	for _, m := range ms {
		waitServing(t, ctx, m)
	}
	conns := map[*testutil.Member]*grpc.ClientConn{}
	for _, m := range ms {
		conn, err := grpc.NewClient("passthrough:///"+m.ClientAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns[m] = conn
	}

	// Member ids are public: Status shows each member's.
	ids := map[*testutil.Member]uint64{}
	for _, m := range ms {
		ids[m] = statusOf(t, ctx, conns[m]).GetMemberId()
	}

	// Ask every member, naming every member id, as a joiner did.
	answers, leaked := 0, 0
	secrets := map[string]bool{}
	for _, m := range ms {
		for _, named := range ms {
			var hdr metadata.MD
			cctx := metadata.AppendToOutgoingContext(ctx, "dkv-join-member", strconv.FormatUint(ids[named], 16))
			_, err := dkvpb.NewClusterClient(conns[m]).MemberList(cctx, &dkvpb.MemberListRequest{Linearizable: true}, grpc.Header(&hdr))
			if err != nil {
				t.Logf("MemberList on %s naming %s: %v", m.Name, named.Name, err)
				continue
			}
			answers++
			if v := hdr.Get("dkv-peer-secret"); len(v) > 0 {
				leaked++
				secrets[v[0]] = true
				t.Logf("MemberList on %s naming %s: handed the peer secret", m.Name, named.Name)
			}
		}
	}
	if answers == 0 {
		t.Fatal("no member answered MemberList: the stranger's questions were never asked")
	}
	if leaked > 0 {
		t.Errorf("%d answers to a stranger, %d leaked the peer secret", answers, leaked)
	}

	// Forge with whatever was obtained; with nothing, with the secret a
	// token-less cluster would have derived from --initial-cluster.
	var candidates [][]byte
	for s := range secrets {
		b, err := hex.DecodeString(s)
		if err == nil {
			candidates = append(candidates, b)
		}
	}
	if len(candidates) == 0 {
		var parts []string
		for _, m := range ms {
			parts = append(parts, m.Name+"="+m.PeerAddr)
		}
		sort.Strings(parts)
		h := sha256.Sum256([]byte("dkv-peer-secret\x00dkv-default\x00" + strings.Join(parts, ",")))
		candidates = append(candidates, h[:])
	}
	leader := leaderOf(ctx, ms)
	if leader == nil {
		t.Fatal("no leader")
	}
	var follower *testutil.Member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	// An idle cluster, so the forged entry extends the follower's log.
	var st *dkvpb.StatusResponse
	testutil.Eventually(t, 20*time.Second, "an idle cluster", func() bool {
		prev := st
		st = statusOf(t, ctx, conns[follower])
		return prev != nil && st.GetRaftIndex() == prev.GetRaftIndex() && st.GetRaftAppliedIndex() == st.GetRaftIndex() &&
			st.GetRaftTerm() == prev.GetRaftTerm()
	})
	f := &forger{t: t, cluster: st.GetHeader().GetClusterId()}
	evil, _ := proto.Marshal(&dkvpb.InternalRequest{Id: 4343, Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte("forged-by-stranger"), Value: []byte("1")}}})
	term, idx := st.GetRaftTerm(), st.GetRaftIndex()
	from, to := ids[leader], ids[follower]
	app := &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(from), To: new(to), Term: new(term),
		Index: new(idx), LogTerm: new(term),
		Entries: []*raftpb.Entry{{Term: new(term), Index: new(idx + 1), Data: evil}},
		Commit:  new(idx + 1)}
	for _, sec := range candidates {
		err := f.messages(follower.PeerAddr, handshake(from, peerProof(sec, f.cluster, from, to)), from, to, app)
		t.Logf("forged MsgApp as %s to %s: %v", leader.Name, follower.Name, err)
	}

	// A real write after the forgery, through any member, then look.
	cl, err := client.New(ctx, client.Config{Endpoints: []string{ms[0].ClientAddr, ms[1].ClientAddr, ms[2].ClientAddr}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	_, werr := cl.Put(wctx, "after-forgery", []byte("1"))
	wcancel()
	if werr != nil {
		t.Errorf("put after the forgery: %v", werr)
	}
	for _, m := range ms {
		select {
		case <-m.Exited():
			continue
		default:
		}
		c := memberClient(t, ctx, m)
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.Get(rctx, "forged-by-stranger", client.WithSerializable())
		rcancel()
		if err == nil {
			t.Errorf("the forged key forged-by-stranger is written on %s", m.Name)
		} else if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get forged-by-stranger on %s: %v", m.Name, err)
		}
	}
	select {
	case <-leader.Exited():
		log := logOf(leader)
		if i := strings.Index(log, "panic:"); i >= 0 {
			log = log[i:min(len(log), i+200)]
		}
		t.Errorf("leader %s died: %s", leader.Name, log)
	default:
		lc := memberClient(t, ctx, leader)
		if _, err := lc.Status(ctx); err != nil {
			t.Errorf("leader %s does not answer after the forgery: %v", leader.Name, err)
		}
	}
}

// TestProcessMultiNodeBootstrapNeedsPeerSecret: a member of a
// multi-node cluster started with no token, secret file or peer TLS is
// refused, exit 2, naming the flags; with --insecure-peer the cluster
// runs, and every start says it is insecure (log and /readyz), also when
// the flag is no longer given.
func TestProcessMultiNodeBootstrapNeedsPeerSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	dir := t.TempDir()
	p1, p2, p3 := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
	code, out := serveRefused(t, "serve", "--name", "n1", "--client-addr", testutil.FreeAddr(t), "--peer-addr", p1, "--http-addr", "",
		"--data-dir", filepath.Join(dir, "n1"), "--initial-cluster", "n1="+p1+",n2="+p2+",n3="+p3)
	if code != 2 {
		t.Errorf("a 3-member bootstrap without a peer secret: exit %d (-1: it started), want 2 (bad configuration); output:\n%s", code, out)
	}
	for _, flag := range []string{"--initial-cluster-token", "--peer-secret-file", "--peer-cert-file", "--insecure-peer"} {
		if !strings.Contains(out, flag) {
			t.Errorf("the refusal does not name %s:\n%s", flag, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "n1", "peer-secret")); !os.IsNotExist(err) {
		t.Errorf("the refused member kept a peer secret: %v", err)
	}

	ms := startProcClusterWith(t, testutil.ClusterOptions{HTTP: true, NoToken: true, Args: []string{"--insecure-peer"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, m := range ms {
		waitServing(t, ctx, m)
		if _, body := readyz(t, m); !strings.Contains("\n"+body, "\nwarning: insecure-peer\n") {
			t.Errorf("%s runs with --insecure-peer, but /readyz says %q", m.Name, body)
		}
		if !strings.Contains(logOf(m), "INSECURE PEER PORT") {
			t.Errorf("%s runs with --insecure-peer and logged no warning", m.Name)
		}
	}
	// Restarted without the flag: it runs on the secret its data dir
	// holds, and still says so.
	n1 := ms[0]
	sigterm(t, n1)
	var args []string
	for _, a := range n1.Args {
		if a != "--insecure-peer" {
			args = append(args, a)
		}
	}
	n1.Args = args
	n1.Start(t)
	waitServing(t, ctx, n1)
	if _, body := readyz(t, n1); !strings.Contains(body, "warning: insecure-peer") {
		t.Errorf("restarted without --insecure-peer, /readyz says %q", body)
	}
	if n := strings.Count(logOf(n1), "INSECURE PEER PORT"); n != 1 {
		t.Errorf("the restart logged %d insecure-peer warnings, want 1 (the log file is per start)", n)
	}
}

// TestJoinNeedsPeerSecretFromOperator: dkv member add prints
// the start line a new member needs, without the secret; a joiner
// without a peer secret is refused before it is added; with the
// cluster's token, or a copy of a member's peer-secret file, it joins.
func TestJoinNeedsPeerSecretFromOperator(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	token := servertest.RandomToken()
	ms := startProcClusterWith(t, testutil.ClusterOptions{HTTP: true, Token: token})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitProcCluster(t, ms)
	for _, m := range ms {
		waitServing(t, ctx, m)
	}
	if _, body := readyz(t, ms[0]); body != "ok\n" {
		t.Errorf("a cluster with a token: /readyz says %q, want just ok", body)
	}
	secret, err := os.ReadFile(filepath.Join(ms[0].Dir, "peer-secret"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	peer4, client4 := testutil.FreeAddr(t), testutil.FreeAddr(t)
	out, code := dkvCLI(t, ms, "member", "add", "n4", peer4)
	if code != 0 {
		t.Fatalf("member add: exit %d: %s", code, out)
	}
	for _, want := range []string{"start it with:", "dkv serve --name n4 --peer-addr " + peer4 + " --join ", "--initial-cluster-token TOKEN", "--peer-secret-file"} {
		if !strings.Contains(out, want) {
			t.Errorf("member add does not print %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, token) || strings.Contains(out, strings.TrimSpace(string(secret))) {
		t.Errorf("member add printed the secret:\n%s", out)
	}
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	join4 := []string{"serve", "--name", "n4", "--peer-addr", peer4, "--client-addr", client4, "--http-addr", "",
		"--data-dir", filepath.Join(dir, "n4"), "--join", strings.Join(eps, ",")}
	code, out = serveRefused(t, join4...)
	if code != 2 || !strings.Contains(out, "no peer secret") || !strings.Contains(out, "--initial-cluster-token") {
		t.Errorf("joining without a peer secret: exit %d (-1: it started), want 2 naming --initial-cluster-token; output:\n%s", code, out)
	}

	// With the token: it joins and serves what the cluster writes.
	n4 := &testutil.Member{Name: "n4", ClientAddr: client4, PeerAddr: peer4, Dir: filepath.Join(dir, "n4"), Args: append(join4, "--initial-cluster-token", token)}
	n4.Start(t)
	t.Cleanup(func() {
		if n4.Running() {
			n4.Kill()
		}
	})
	cl := memberClient(t, ctx, ms[0])
	if _, err := cl.Put(ctx, "joined", []byte("yes")); err != nil {
		t.Fatal(err)
	}
	c4 := memberClient(t, ctx, n4)
	testutil.Eventually(t, 60*time.Second, "n4 serving a linearizable read of what the cluster wrote", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		kv, err := c4.Get(rctx, "joined")
		return err == nil && string(kv.Value) == "yes"
	})
	if got, err := os.ReadFile(filepath.Join(n4.Dir, "peer-secret")); err != nil || string(got) != string(secret) {
		t.Errorf("n4's peer secret is not the cluster's: %v", err)
	}

	// With a copy of a member's peer-secret file: the same.
	file := filepath.Join(dir, "cluster-secret")
	if err := os.WriteFile(file, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	client5 := testutil.FreeAddr(t)
	n5 := &testutil.Member{Name: "n5", ClientAddr: client5, PeerAddr: testutil.FreeAddr(t), Dir: filepath.Join(dir, "n5")}
	n5.Args = []string{"serve", "--name", "n5", "--peer-addr", n5.PeerAddr, "--client-addr", client5, "--http-addr", "",
		"--data-dir", n5.Dir, "--join", strings.Join(eps, ","), "--peer-secret-file", file}
	n5.Start(t)
	t.Cleanup(func() {
		if n5.Running() {
			n5.Kill()
		}
	})
	waitServing(t, ctx, n5)
}
