package etcdapi_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
)

// tenants is a node with auth on and three users: root; alice, readwrite
// on app/; bob, readwrite on bob/. Each context carries its user's token.
// Lease 7 was granted before auth was enabled, so it has no owner.
type tenants struct {
	n                *node
	root, alice, bob context.Context
	lease            dkvpb.LeaseClient
	lock             dkvpb.LockClient
}

const ownerlessLease = 7

func startTenants(t *testing.T) *tenants {
	n := startNode(t)
	ctx := ctxT(t)
	a := dkvpb.NewAuthClient(n.conn)
	lc := dkvpb.NewLeaseClient(n.conn)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("set-up: %s: %v", what, err)
		}
	}
	_, err := lc.Grant(ctx, &dkvpb.LeaseGrantRequest{Id: ownerlessLease, TtlMs: 600_000})
	must("grant before auth", err)
	for _, u := range []string{"root", "alice", "bob"} {
		_, err := a.UserAdd(ctx, &dkvpb.UserAddRequest{Name: u, Password: u + "pw"})
		must("add "+u, err)
	}
	_, err = a.UserGrantRole(ctx, &dkvpb.UserRoleRequest{User: "root", Role: "root"})
	must("grant root", err)
	for user, prefix := range map[string]string{"alice": "app/", "bob": "bob/"} {
		role := user + "-role"
		_, err := a.RoleAdd(ctx, &dkvpb.RoleRequest{Name: role})
		must("role "+role, err)
		_, err = a.RoleGrantPermission(ctx, &dkvpb.RoleGrantPermissionRequest{Role: role, Prefix: true,
			Permission: &dkvpb.Permission{Type: dkvpb.Permission_READWRITE, Key: []byte(prefix)}})
		must("permission "+role, err)
		_, err = a.UserGrantRole(ctx, &dkvpb.UserRoleRequest{User: user, Role: role})
		must("grant "+role, err)
	}
	_, err = a.AuthEnable(ctx, &dkvpb.AuthEnableRequest{})
	must("enable", err)
	as := func(u string) context.Context {
		tok, err := a.Authenticate(ctx, &dkvpb.AuthenticateRequest{Name: u, Password: u + "pw"})
		must("authenticate "+u, err)
		return metadata.AppendToOutgoingContext(ctx, "token", tok.Token)
	}
	return &tenants{n: n, root: as("root"), alice: as("alice"), bob: as("bob"), lease: lc, lock: dkvpb.NewLockClient(n.conn)}
}

// denied fails the test unless err is a PermissionDenied (DKV's or etcd's).
func denied(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want PermissionDenied", what)
		return
	}
	if rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCPermissionDenied) {
		return
	}
	if dkverr.CodeOf(dkverr.FromGRPC(err)) != dkverr.PermissionDenied {
		t.Errorf("%s: %v, want PermissionDenied", what, err)
	}
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestLeaseOwnershipDKV: a lease belongs to the user
// who granted it. Another user cannot see it in the list, keep it alive,
// read its TTL, revoke it, or attach a key or a lock to it; root can do all.
// A lease granted before auth was enabled is root's alone.
func TestLeaseOwnershipDKV(t *testing.T) {
	x := startTenants(t)
	kv := x.n.dkv

	rootLease, err := x.lease.Grant(x.root, &dkvpb.LeaseGrantRequest{TtlMs: 600_000})
	ok(t, "root grant", err)
	_, err = kv.Put(x.root, &dkvpb.PutRequest{Key: []byte("other/leased"), Value: []byte("v"), Lease: rootLease.Id})
	ok(t, "root put other/leased on its lease", err)
	_, err = x.lock.Acquire(x.root, &dkvpb.LockAcquireRequest{Key: []byte("other/lock"), Lease: rootLease.Id, Owner: "root-1"})
	ok(t, "root lock other/lock on its lease", err)
	bobLease, err := x.lease.Grant(x.bob, &dkvpb.LeaseGrantRequest{TtlMs: 600_000})
	ok(t, "bob grant", err)
	aliceLease, err := x.lease.Grant(x.alice, &dkvpb.LeaseGrantRequest{TtlMs: 600_000})
	ok(t, "alice grant", err)

	ls, err := x.lease.Leases(x.alice, &dkvpb.LeaseLeasesRequest{})
	ok(t, "alice list", err)
	var ids []int64
	for _, l := range ls.Leases {
		ids = append(ids, l.Id)
	}
	if !slices.Equal(ids, []int64{aliceLease.Id}) {
		t.Errorf("alice lists leases %v, want only her own %d", ids, aliceLease.Id)
	}
	for _, id := range []int64{rootLease.Id, bobLease.Id, ownerlessLease} {
		_, err = x.lease.KeepAliveOnce(x.alice, &dkvpb.LeaseKeepAliveOnceRequest{Id: id})
		denied(t, "alice keep-alive once of another's lease", err)
		ks, err := x.lease.KeepAlive(x.alice)
		ok(t, "alice keep-alive stream", err)
		ok(t, "send", ks.Send(&dkvpb.LeaseKeepAliveRequest{Ids: []int64{id}}))
		_, err = ks.Recv()
		denied(t, "alice keep-alive stream of another's lease", err)
		_, err = x.lease.TimeToLive(x.alice, &dkvpb.LeaseTimeToLiveRequest{Id: id})
		denied(t, "alice time-to-live of another's lease", err)
		_, err = x.lease.Revoke(x.alice, &dkvpb.LeaseRevokeRequest{Id: id})
		denied(t, "alice revoke of another's lease", err)
		_, err = kv.Put(x.alice, &dkvpb.PutRequest{Key: []byte("app/onbob"), Value: []byte("v"), Lease: id})
		denied(t, "alice put app/onbob on another's lease", err)
		_, err = kv.Txn(x.alice, &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{
			RequestPut: &dkvpb.PutRequest{Key: []byte("app/onbob"), Value: []byte("v"), Lease: id}}}}})
		denied(t, "alice txn put app/onbob on another's lease", err)
		_, err = x.lock.Acquire(x.alice, &dkvpb.LockAcquireRequest{Key: []byte("app/lk"), Lease: id, Owner: "alice-1"})
		denied(t, "alice lock on another's lease", err)
	}
	// Her own lease works as before.
	_, err = x.lease.KeepAliveOnce(x.alice, &dkvpb.LeaseKeepAliveOnceRequest{Id: aliceLease.Id})
	ok(t, "alice keep-alive of her lease", err)
	_, err = kv.Put(x.alice, &dkvpb.PutRequest{Key: []byte("app/mine"), Value: []byte("v"), Lease: aliceLease.Id})
	ok(t, "alice put on her lease", err)
	ttl, err := x.lease.TimeToLive(x.alice, &dkvpb.LeaseTimeToLiveRequest{Id: aliceLease.Id, Keys: true})
	ok(t, "alice time-to-live of her lease", err)
	if len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "app/mine" {
		t.Errorf("alice's lease keys %q, want [app/mine]", ttl.Keys)
	}
	// Bob's revoke of his own lease is not blocked by a key of hers.
	_, err = x.lease.Revoke(x.bob, &dkvpb.LeaseRevokeRequest{Id: bobLease.Id})
	ok(t, "bob revoke of his lease", err)
	// Root sees and may do everything.
	ls, err = x.lease.Leases(x.root, &dkvpb.LeaseLeasesRequest{})
	ok(t, "root list", err)
	if len(ls.Leases) != 3 {
		t.Errorf("root lists %v, want the 3 leases left (ownerless, root's, alice's)", ls.Leases)
	}
	for _, id := range []int64{aliceLease.Id, ownerlessLease, rootLease.Id} {
		_, err = x.lease.KeepAliveOnce(x.root, &dkvpb.LeaseKeepAliveOnceRequest{Id: id})
		ok(t, "root keep-alive", err)
		_, err = x.lease.TimeToLive(x.root, &dkvpb.LeaseTimeToLiveRequest{Id: id})
		ok(t, "root time-to-live", err)
	}
	_, err = kv.Put(x.root, &dkvpb.PutRequest{Key: []byte("app/byroot"), Value: []byte("v"), Lease: aliceLease.Id})
	ok(t, "root put on alice's lease", err)
	_, err = x.lease.Revoke(x.root, &dkvpb.LeaseRevokeRequest{Id: aliceLease.Id})
	ok(t, "root revoke of alice's lease", err)
}

// TestLeaseOwnershipEtcd: lease ownership through etcd's Lease and KV API.
func TestLeaseOwnershipEtcd(t *testing.T) {
	x := startTenants(t)
	l, kv := x.n.l, x.n.kv

	rootLease, err := l.LeaseGrant(x.root, &etcdserverpb.LeaseGrantRequest{TTL: 600})
	ok(t, "root grant", err)
	_, err = kv.Put(x.root, &etcdserverpb.PutRequest{Key: []byte("other/leased"), Value: []byte("v"), Lease: rootLease.ID})
	ok(t, "root put other/leased", err)
	bobLease, err := l.LeaseGrant(x.bob, &etcdserverpb.LeaseGrantRequest{TTL: 600})
	ok(t, "bob grant", err)
	aliceLease, err := l.LeaseGrant(x.alice, &etcdserverpb.LeaseGrantRequest{TTL: 600})
	ok(t, "alice grant", err)

	ls, err := l.LeaseLeases(x.alice, &etcdserverpb.LeaseLeasesRequest{})
	ok(t, "alice list", err)
	if len(ls.Leases) != 1 || ls.Leases[0].ID != aliceLease.ID {
		t.Errorf("alice lists %v, want only her lease %d", ls.Leases, aliceLease.ID)
	}
	for _, id := range []int64{rootLease.ID, bobLease.ID, ownerlessLease} {
		ks, err := l.LeaseKeepAlive(x.alice)
		ok(t, "alice keep-alive stream", err)
		ok(t, "send", ks.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: id}))
		r, err := ks.Recv()
		if err == nil {
			t.Errorf("alice keep-alive of lease %d: answered %v, want PermissionDenied", id, r)
		} else {
			denied(t, "alice keep-alive of another's lease", err)
		}
		_, err = l.LeaseTimeToLive(x.alice, &etcdserverpb.LeaseTimeToLiveRequest{ID: id})
		denied(t, "alice time-to-live of another's lease", err)
		_, err = l.LeaseRevoke(x.alice, &etcdserverpb.LeaseRevokeRequest{ID: id})
		denied(t, "alice revoke of another's lease", err)
		_, err = kv.Put(x.alice, &etcdserverpb.PutRequest{Key: []byte("app/onbob"), Value: []byte("v"), Lease: id})
		denied(t, "alice put app/onbob on another's lease", err)
	}
	_, err = l.LeaseRevoke(x.bob, &etcdserverpb.LeaseRevokeRequest{ID: bobLease.ID})
	ok(t, "bob revoke of his lease", err)

	ks, err := l.LeaseKeepAlive(x.alice)
	ok(t, "alice keep-alive stream", err)
	ok(t, "send", ks.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: aliceLease.ID}))
	if r, err := ks.Recv(); err != nil || r.TTL <= 0 {
		t.Errorf("alice keep-alive of her lease: %v %v", r, err)
	}
	ls, err = l.LeaseLeases(x.root, &etcdserverpb.LeaseLeasesRequest{})
	ok(t, "root list", err)
	if len(ls.Leases) != 3 {
		t.Errorf("root lists %v, want 3 leases", ls.Leases)
	}
	tl, err := l.LeaseTimeToLive(x.root, &etcdserverpb.LeaseTimeToLiveRequest{ID: aliceLease.ID})
	if err != nil || tl.TTL <= 0 {
		t.Errorf("root time-to-live of alice's lease: %v %v", tl, err)
	}
	_, err = l.LeaseRevoke(x.root, &etcdserverpb.LeaseRevokeRequest{ID: aliceLease.ID})
	ok(t, "root revoke of alice's lease", err)
}

// TestForeignLockHandleIsNoOracle: a lock handle for
// a key the caller may not read is refused before any lock state is
// consulted, so the answer is the same whether the handle is current or
// not. Fencing another key with a handle for a lock the caller may read
// (docs/locks.md, guarantee 4) keeps working.
func TestForeignLockHandleIsNoOracle(t *testing.T) {
	x := startTenants(t)
	kv := x.n.dkv
	acq, err := x.lock.Acquire(x.root, &dkvpb.LockAcquireRequest{Key: []byte("other/lock"), TtlMs: 600_000, Owner: "root-1"})
	ok(t, "root lock other/lock", err)
	if !acq.Acquired {
		t.Fatalf("root lock other/lock: %v", acq)
	}
	cur := acq.Handle
	stale := &dkvpb.LockHandle{Key: cur.Key, Owner: cur.Owner, Lease: cur.Lease, Token: cur.Token + 1}

	var answers []string
	for _, h := range []*dkvpb.LockHandle{cur, stale} {
		calls := map[string]func() error{
			"put": func() error {
				_, err := kv.Put(x.alice, &dkvpb.PutRequest{Key: []byte("app/fence"), Value: []byte("v"), Lock: h})
				return err
			},
			"delete": func() error {
				_, err := kv.DeleteRange(x.alice, &dkvpb.DeleteRangeRequest{Key: []byte("app/fence"), Lock: h})
				return err
			},
			"get": func() error {
				_, err := kv.Range(x.alice, &dkvpb.RangeRequest{Key: []byte("app/fence"), Lock: h})
				return err
			},
			"counter": func() error {
				_, err := kv.Counter(x.alice, &dkvpb.CounterRequest{Key: []byte("app/fence"), Delta: 1, Lock: h})
				return err
			},
			"txn LOCK compare": func() error {
				_, err := kv.Txn(x.alice, &dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: []byte("app/fence"),
					Target: dkvpb.Compare_LOCK, TargetUnion: &dkvpb.Compare_Lock{Lock: h}}}})
				return err
			},
			"txn put": func() error {
				_, err := kv.Txn(x.alice, &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{
					RequestPut: &dkvpb.PutRequest{Key: []byte("app/fence"), Value: []byte("v"), Lock: h}}}}})
				return err
			},
		}
		for _, name := range []string{"put", "delete", "get", "counter", "txn LOCK compare", "txn put"} {
			err := calls[name]()
			denied(t, "alice "+name+" on app/fence with root's handle (token "+fmt.Sprint(h.Token)+")", err)
			answers = append(answers, name+": "+errText(err))
		}
	}
	half := len(answers) / 2
	for i := range half {
		if answers[i] != answers[half+i] {
			t.Errorf("the answer depends on the lock's state:\n current handle: %s\n   token + 1:    %s", answers[i], answers[half+i])
		}
	}

	// Guarantee 4 stands: alice fences app/data with her own app/lock.
	mine, err := x.lock.Acquire(x.alice, &dkvpb.LockAcquireRequest{Key: []byte("app/lock"), TtlMs: 600_000, Owner: "alice-1"})
	ok(t, "alice lock app/lock", err)
	_, err = kv.Put(x.alice, &dkvpb.PutRequest{Key: []byte("app/data"), Value: []byte("v"), Lock: mine.Handle})
	ok(t, "alice put app/data fenced by app/lock", err)
	_, err = kv.Put(x.root, &dkvpb.PutRequest{Key: []byte("app/data"), Value: []byte("v"), Lock: cur})
	ok(t, "root put app/data fenced by other/lock", err)
	_, err = kv.Put(x.root, &dkvpb.PutRequest{Key: []byte("app/data"), Value: []byte("v"), Lock: stale})
	if dkverr.CodeOf(dkverr.FromGRPC(err)) != dkverr.Locked {
		t.Errorf("root put with a stale handle: %v, want Locked", err)
	}
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
