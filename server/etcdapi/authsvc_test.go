package etcdapi_test

import (
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/metadata"
)

// TestAuthService: users, roles and permissions set up through etcd's
// Auth service (as etcdctl user/role does) are DKV's: the token
// Authenticate gives works as clientv3 sends it, a permission's key and
// range_end bound what the user may do, through KV and through the
// lock and election services; refusals are etcd's errors.
func TestAuthService(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	a := etcdserverpb.NewAuthClient(n.conn)

	_, err := a.Authenticate(ctx, &etcdserverpb.AuthenticateRequest{Name: "root", Password: "x"})
	isErr(t, err, rpctypes.ErrGRPCAuthNotEnabled)
	_, err = a.AuthEnable(ctx, &etcdserverpb.AuthEnableRequest{})
	isErr(t, err, rpctypes.ErrGRPCRootUserNotExist)

	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err = a.UserAdd(ctx, &etcdserverpb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
	must("user add root", err)
	_, err = a.UserGrantRole(ctx, &etcdserverpb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
	must("grant root", err)
	_, err = a.UserAdd(ctx, &etcdserverpb.AuthUserAddRequest{Name: "alice", Password: "alicepw"})
	must("user add alice", err)
	_, err = a.UserAdd(ctx, &etcdserverpb.AuthUserAddRequest{Name: "alice", Password: "again"})
	isErr(t, err, rpctypes.ErrGRPCUserAlreadyExist)
	_, err = a.UserAdd(ctx, &etcdserverpb.AuthUserAddRequest{Password: "p"})
	isErr(t, err, rpctypes.ErrGRPCUserEmpty)
	_, err = a.RoleAdd(ctx, &etcdserverpb.AuthRoleAddRequest{Name: "app"})
	must("role add", err)
	_, err = a.RoleAdd(ctx, &etcdserverpb.AuthRoleAddRequest{Name: "app"})
	isErr(t, err, rpctypes.ErrGRPCRoleAlreadyExist)
	// [app/, app0): etcdctl role grant-permission --prefix app readwrite app/
	_, err = a.RoleGrantPermission(ctx, &etcdserverpb.AuthRoleGrantPermissionRequest{Name: "app",
		Perm: &authpb.Permission{PermType: authpb.READWRITE, Key: []byte("app/"), RangeEnd: []byte("app0")}})
	must("grant permission", err)
	// One key, read only.
	_, err = a.RoleGrantPermission(ctx, &etcdserverpb.AuthRoleGrantPermissionRequest{Name: "app",
		Perm: &authpb.Permission{PermType: authpb.READ, Key: []byte("conf")}})
	must("grant read", err)
	_, err = a.RoleRevokePermission(ctx, &etcdserverpb.AuthRoleRevokePermissionRequest{Role: "app", Key: []byte("nothing")})
	isErr(t, err, rpctypes.ErrGRPCPermissionNotGranted)
	_, err = a.UserGrantRole(ctx, &etcdserverpb.AuthUserGrantRoleRequest{User: "alice", Role: "app"})
	must("grant app", err)
	_, err = a.UserGrantRole(ctx, &etcdserverpb.AuthUserGrantRoleRequest{User: "bob", Role: "app"})
	isErr(t, err, rpctypes.ErrGRPCUserNotFound)
	_, err = a.UserRevokeRole(ctx, &etcdserverpb.AuthUserRevokeRoleRequest{Name: "alice", Role: "nope"})
	isErr(t, err, rpctypes.ErrGRPCRoleNotGranted)

	rg, err := a.RoleGet(ctx, &etcdserverpb.AuthRoleGetRequest{Role: "app"})
	must("role get", err)
	got := map[string]string{}
	for _, p := range rg.Perm {
		got[string(p.Key)] = fmt.Sprintf("%s %q", p.PermType, p.RangeEnd)
	}
	if len(got) != 2 || got["app/"] != `READWRITE "app0"` || got["conf"] != `READ ""` {
		t.Fatalf("role get: %v", got)
	}
	ug, err := a.UserGet(ctx, &etcdserverpb.AuthUserGetRequest{Name: "alice"})
	if err != nil || len(ug.Roles) != 1 || ug.Roles[0] != "app" {
		t.Fatalf("user get: %v %v", ug, err)
	}
	ul, err := a.UserList(ctx, &etcdserverpb.AuthUserListRequest{})
	if err != nil || len(ul.Users) != 2 {
		t.Fatalf("user list: %v %v", ul, err)
	}
	rl, err := a.RoleList(ctx, &etcdserverpb.AuthRoleListRequest{})
	if err != nil || len(rl.Roles) != 2 {
		t.Fatalf("role list: %v %v", rl, err)
	}

	_, err = a.AuthEnable(ctx, &etcdserverpb.AuthEnableRequest{})
	must("auth enable", err)
	if st, err := a.AuthStatus(ctx, &etcdserverpb.AuthStatusRequest{}); err != nil || !st.Enabled || st.AuthRevision == 0 {
		t.Fatalf("auth status: %v %v", st, err)
	}
	_, err = a.Authenticate(ctx, &etcdserverpb.AuthenticateRequest{Name: "alice", Password: "wrong"})
	isErr(t, err, rpctypes.ErrGRPCAuthFailed)
	tok, err := a.Authenticate(ctx, &etcdserverpb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	must("authenticate", err)
	alice := metadata.AppendToOutgoingContext(ctx, "token", tok.Token)

	if _, err := n.kv.Put(alice, &etcdserverpb.PutRequest{Key: []byte("app/x"), Value: []byte("1")}); err != nil {
		t.Fatalf("alice put app/x: %v", err)
	}
	if _, err := n.kv.Range(alice, &etcdserverpb.RangeRequest{Key: []byte("conf")}); err != nil {
		t.Fatalf("alice read conf: %v", err)
	}
	_, err = n.kv.Put(alice, &etcdserverpb.PutRequest{Key: []byte("conf"), Value: []byte("1")})
	isErr(t, err, rpctypes.ErrGRPCPermissionDenied)
	_, err = a.UserList(alice, &etcdserverpb.AuthUserListRequest{})
	isErr(t, err, rpctypes.ErrGRPCPermissionDenied)
	_, err = a.UserList(ctx, &etcdserverpb.AuthUserListRequest{})
	isErr(t, err, rpctypes.ErrGRPCUserEmpty)

	// The lock and election services act with the caller's rights.
	g, err := n.l.LeaseGrant(alice, &etcdserverpb.LeaseGrantRequest{TTL: 30})
	must("alice lease", err)
	lc := v3lockpb.NewLockClient(n.conn)
	if _, err := lc.Lock(alice, &v3lockpb.LockRequest{Name: []byte("app/lock"), Lease: g.ID}); err != nil {
		t.Fatalf("alice lock under app/: %v", err)
	}
	_, err = lc.Lock(alice, &v3lockpb.LockRequest{Name: []byte("other/lock"), Lease: g.ID})
	isErr(t, err, rpctypes.ErrGRPCPermissionDenied)
	_, err = lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("app/lock"), Lease: g.ID})
	isErr(t, err, rpctypes.ErrGRPCUserEmpty)
	ec := v3electionpb.NewElectionClient(n.conn)
	_, err = ec.Campaign(alice, &v3electionpb.CampaignRequest{Name: []byte("other/e"), Lease: g.ID, Value: []byte("v")})
	isErr(t, err, rpctypes.ErrGRPCPermissionDenied)

	rtok, err := a.Authenticate(ctx, &etcdserverpb.AuthenticateRequest{Name: "root", Password: "rootpw"})
	must("authenticate root", err)
	root := metadata.AppendToOutgoingContext(ctx, "token", rtok.Token)
	_, err = a.UserDelete(root, &etcdserverpb.AuthUserDeleteRequest{Name: "alice"})
	must("user delete", err)
	_, err = a.RoleDelete(root, &etcdserverpb.AuthRoleDeleteRequest{Role: "app"})
	must("role delete", err)
	_, err = a.RoleGet(root, &etcdserverpb.AuthRoleGetRequest{Role: "app"})
	isErr(t, err, rpctypes.ErrGRPCRoleNotFound)
	_, err = a.AuthDisable(root, &etcdserverpb.AuthDisableRequest{})
	must("auth disable", err)
	if st, err := a.AuthStatus(ctx, &etcdserverpb.AuthStatusRequest{}); err != nil || st.Enabled {
		t.Fatalf("auth status after disable: %v %v", st, err)
	}
}
