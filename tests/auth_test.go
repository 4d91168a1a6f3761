package tests

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

func authClient(t *testing.T, c *servertest.Cluster, user, password string) *client.Client {
	t.Helper()
	var eps []string
	for _, n := range c.Nodes {
		eps = append(eps, n.Srv.ClientAddr())
	}
	cl, err := client.New(context.Background(), client.Config{Endpoints: eps, AutoSyncInterval: -1, Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustDeny(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("%s: got %v, want PermissionDenied", what, err)
	}
}

// TestAuthAcrossCluster is authorization end to end: on
// a 3-node cluster, alice with readwrite on prefix app/ works under app/
// and is refused everything else her roles do not cover, on every path;
// revoking her role takes effect at once even for an unexpired token.
func TestAuthAcrossCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := servertest.NewClusterEach(t, 3, server.Config{AuthBcryptCost: bcrypt.MinCost, Pprof: true}, func(nd *servertest.Node) {
		nd.Cfg.HTTPAddr = testutil.FreeAddr(t)
	})
	setup := authClient(t, c, "", "")
	// Data alice must not see, made before auth is on: other/x, and a
	// lease holding other/held.
	_, err := setup.Put(ctx, "other/x", []byte("secret"))
	mustOK(t, "put other/x", err)
	lg, err := setup.Grant(ctx, time.Hour)
	mustOK(t, "grant", err)
	_, err = setup.Put(ctx, "other/held", []byte("v"), client.WithLease(lg.ID))
	mustOK(t, "put other/held", err)

	mustOK(t, "user add root", setup.UserAdd(ctx, "root", "rootpw"))
	if err := setup.AuthEnable(ctx); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("auth enable without root holding role root: %v, want InvalidInput", err)
	}
	mustOK(t, "grant root", setup.UserGrantRole(ctx, "root", "root"))
	mustOK(t, "role add app", setup.RoleAdd(ctx, "app"))
	mustOK(t, "grant app/", setup.RoleGrantPermission(ctx, "app", dkvpb.Permission_READWRITE, "app/", "", true))
	mustOK(t, "role add wo", setup.RoleAdd(ctx, "wo"))
	mustOK(t, "grant wo/ write", setup.RoleGrantPermission(ctx, "wo", dkvpb.Permission_WRITE, "wo/", "", true))
	mustOK(t, "user add alice", setup.UserAdd(ctx, "alice", "alicepw"))
	mustOK(t, "alice app", setup.UserGrantRole(ctx, "alice", "app"))
	mustOK(t, "alice wo", setup.UserGrantRole(ctx, "alice", "wo"))
	mustOK(t, "auth enable", setup.AuthEnable(ctx))

	// The same client without credentials is now refused.
	if _, err := setup.Get(ctx, "app/a"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("get without a token: %v, want Unauthenticated", err)
	}
	if _, err := authClient(t, c, "alice", "wrong").Get(ctx, "app/a"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("wrong password: %v, want Unauthenticated", err)
	}
	root := authClient(t, c, "root", "rootpw")
	alice := authClient(t, c, "alice", "alicepw")

	// What alice may do, on any member.
	w, err := alice.WatchPrefix(ctx, "app/")
	mustOK(t, "watch app/", err)
	_, err = alice.Put(ctx, "app/a", []byte("1"))
	mustOK(t, "put app/a", err)
	kv, err := alice.Get(ctx, "app/a")
	mustOK(t, "get app/a", err)
	if string(kv.Value) != "1" {
		t.Fatalf("get app/a = %q", kv.Value)
	}
	select {
	case b := <-w.Events():
		if len(b.Events) != 1 || b.Events[0].KV.Key != "app/a" {
			t.Fatalf("watch app/ delivered %+v", b)
		}
	case <-ctx.Done():
		t.Fatal("watch app/ delivered nothing")
	}
	h, err := alice.Acquire(ctx, "app/lock", time.Minute)
	mustOK(t, "lock app/lock", err)
	_, err = alice.Put(ctx, "app/fenced", []byte("x"), client.WithLock(h))
	if err != nil && !errors.Is(err, client.ErrInvalidInput) && !errors.Is(err, client.ErrLocked) {
		t.Fatalf("fenced put under app/: %v", err)
	}
	mustOK(t, "unlock app/lock", alice.Release(ctx, h))
	_, err = alice.Put(ctx, "wo/k", []byte("v"))
	mustOK(t, "put wo/k (write only)", err)

	// What she may not.
	_, err = alice.Get(ctx, "other/x")
	mustDeny(t, "get other/x", err)
	_, err = alice.WatchPrefix(ctx, "")
	mustDeny(t, `watch prefix ""`, err)
	_, err = alice.Range(ctx, "app/", client.WithFromKey())
	mustDeny(t, "from-key range at app/", err)
	_, err = alice.Txn(ctx).If(client.Value("other/x").Equal([]byte("secret"))).Then(client.OpPut("app/t", []byte("1"))).Commit()
	mustDeny(t, "txn comparing other/x", err)
	_, err = alice.Txn(ctx).If(client.Exists("app/a")).Then(client.OpPut("app/t", []byte("1"))).Else(client.OpGet("other/x")).Commit()
	mustDeny(t, "txn with a nested get of other/x", err)
	_, err = alice.Txn(ctx).Then(client.OpPut("app/t", []byte("1"), client.WithPrevKV()), client.OpDelete("other/x")).Commit()
	mustDeny(t, "txn deleting other/x", err)
	_, err = alice.Put(ctx, "wo/k", []byte("v2"), client.WithPrevKV())
	mustDeny(t, "put --prev on a write-only key", err)
	_, err = alice.TimeToLive(ctx, lg.ID, client.WithAttachedKeys())
	mustDeny(t, "time-to-live --keys of a lease holding other/ keys", err)
	mustDeny(t, "revoke of a lease holding other/ keys", alice.Revoke(ctx, lg.ID))
	_, err = alice.MemberRemove(ctx, "n3")
	mustDeny(t, "member remove", err)
	_, err = alice.LeaderTransfer(ctx, "n2")
	mustDeny(t, "leader transfer", err)
	_, err = alice.MemberList(ctx)
	mustDeny(t, "member list", err)
	mustDeny(t, "compaction", alice.Compact(ctx, 1))
	_, err = alice.HashKV(ctx, 0)
	mustDeny(t, "hashkv", err)
	snap, err := dkvpb.NewMaintenanceClient(alice.Conn()).Snapshot(ctx, &dkvpb.SnapshotRequest{})
	if err == nil {
		_, err = snap.Recv()
	}
	if dkverr.CodeOf(err) != dkverr.PermissionDenied {
		t.Fatalf("snapshot download: %v, want PermissionDenied", err)
	}
	_, err = alice.Counter(ctx, "other/n", 1)
	mustDeny(t, "counter other/n", err)
	_, err = alice.Acquire(ctx, "other/lock", time.Minute)
	mustDeny(t, "lock other/lock", err)
	mustDeny(t, "user add by a non-root user", alice.UserAdd(ctx, "mallory", "pw"))

	// Root may do all of it.
	_, err = root.Get(ctx, "other/x")
	mustOK(t, "root get other/x", err)
	_, err = root.MemberList(ctx)
	mustOK(t, "root member list", err)

	// HTTP takes the same checks: Bearer token, /v1/keys/ and pprof.
	hc := c.Nodes[1].Srv.HTTPAddr()
	tok := authenticate(t, ctx, c.Nodes[1], "alice", "alicepw")
	if code := httpGet(t, "http://"+hc+"/v1/keys/app/a", tok); code != 200 {
		t.Fatalf("HTTP get app/a with alice's token: %d", code)
	}
	if code := httpGet(t, "http://"+hc+"/v1/keys/other/x", tok); code != 403 {
		t.Fatalf("HTTP get other/x with alice's token: %d, want 403", code)
	}
	if code := httpGet(t, "http://"+hc+"/v1/keys/app/a", ""); code != 401 {
		t.Fatalf("HTTP get without a token: %d, want 401", code)
	}
	// The JSON gateway forwards the Authorization header as gRPC metadata.
	if code := httpPost(t, "http://"+hc+"/v1/kv/range", tok, `{"key":"YXBwL2E="}`); code != 200 {
		t.Fatalf("gateway range app/a as alice: %d, want 200", code)
	}
	if code := httpPost(t, "http://"+hc+"/v1/kv/range", tok, `{"key":"b3RoZXIveA=="}`); code != 403 {
		t.Fatalf("gateway range other/x as alice: %d, want 403", code)
	}
	if code := httpPost(t, "http://"+hc+"/v1/cluster/members/remove", tok, `{"name":"n3"}`); code != 403 {
		t.Fatalf("gateway member remove as alice: %d, want 403", code)
	}
	if code := httpGet(t, "http://"+hc+"/v1/watch?key=&prefix=true", tok); code != 403 {
		t.Fatalf(`HTTP watch of prefix "" as alice: %d, want 403`, code)
	}
	// Many times: the refusal races the watch request's send, and the
	// status must not depend on who wins (a send that meets the closed
	// stream once made it a 500).
	for i := 0; i < 100; i++ {
		if code := httpGet(t, "http://"+hc+"/v1/watch?key=other/&prefix=true", ""); code != 401 {
			t.Fatalf("HTTP watch without a token (try %d): %d, want 401", i, code)
		}
	}
	if code := httpGet(t, "http://"+hc+"/debug/pprof/cmdline", tok); code != 403 {
		t.Fatalf("pprof as alice: %d, want 403", code)
	}
	for _, open := range []string{"/livez", "/readyz"} {
		if code := httpGet(t, "http://"+hc+open, ""); code != 200 {
			t.Fatalf("%s without a token: %d, want 200", open, code)
		}
	}
	// /metrics names queues from the key space: any user's token, not none.
	if code := httpGet(t, "http://"+hc+"/metrics", ""); code != 401 {
		t.Fatalf("/metrics without a token: %d, want 401", code)
	}
	if code := httpGet(t, "http://"+hc+"/metrics", tok); code != 200 {
		t.Fatalf("/metrics with alice's token: %d, want 200", code)
	}

	// Revoking alice's role: her unexpired token is refused at once, on
	// every member, and her client's next call fails.
	mustOK(t, "revoke alice app", root.UserRevokeRole(ctx, "alice", "app"))
	for _, nd := range c.Nodes {
		testutil.Eventually(t, 10*time.Second, "revocation applied on "+nd.Name, func() bool {
			_, err := nd.KV.Range(metadata.AppendToOutgoingContext(ctx, "token", tok), &dkvpb.RangeRequest{Key: []byte("app/a"), Serializable: true})
			return dkverr.CodeOf(err) == dkverr.Unauthenticated
		})
	}
	_, err = alice.Get(ctx, "app/a")
	mustDeny(t, "get app/a after the role was revoked", err)
	// Her open watch on app/ delivers nothing written after the revocation:
	// its stream is ended and cannot be re-created.
	_, err = root.Put(ctx, "app/after", []byte("x"))
	mustOK(t, "root put app/after", err)
	for b := range w.Events() {
		for _, ev := range b.Events {
			if ev.KV.Key == "app/after" {
				t.Fatal("alice's watch delivered a write made after her role was revoked")
			}
		}
	}
	if err := w.Err(); err == nil {
		t.Fatal("alice's watch ended without an error")
	}

	// A follower forwards root's leader transfer to the leader with root's
	// token, and the leader accepts it.
	f := c.Followers()[0]
	rf, err := client.New(ctx, client.Config{Endpoints: []string{f.Srv.ClientAddr()}, AutoSyncInterval: -1, Username: "root", Password: "rootpw"})
	mustOK(t, "root client on a follower", err)
	defer rf.Close()
	_, err = rf.LeaderTransfer(ctx, f.Name)
	mustOK(t, "leader transfer by root through a follower", err)
}

func authenticate(t *testing.T, ctx context.Context, nd *servertest.Node, user, pw string) string {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+nd.Srv.ClientAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := dkvpb.NewAuthClient(conn).Authenticate(ctx, &dkvpb.AuthenticateRequest{Name: user, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetToken()
}

func httpPost(t *testing.T, url, token, body string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func httpGet(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && strings.HasPrefix(url, "http://") && strings.Contains(url, "/metrics") && !strings.Contains(string(body), "dkv_auth_denied_total") {
		t.Fatalf("/metrics has no dkv_auth_denied_total")
	}
	return resp.StatusCode
}
