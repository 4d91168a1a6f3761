package state

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
)

func ach(c *dkvpb.AuthChange) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Auth{Auth: c}}
}

func userAdd(name string) *dkvpb.InternalRequest {
	return ach(&dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserAdd{UserAdd: &dkvpb.UserAddChange{Name: name, PasswordHash: []byte("hash-of-" + name)}}})
}

func grantRole(user, role string) *dkvpb.InternalRequest {
	return ach(&dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserGrantRole{UserGrantRole: &dkvpb.UserRoleRequest{User: user, Role: role}}})
}

func revokeRole(user, role string) *dkvpb.InternalRequest {
	return ach(&dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserRevokeRole{UserRevokeRole: &dkvpb.UserRoleRequest{User: user, Role: role}}})
}

func roleAdd(name string) *dkvpb.InternalRequest {
	return ach(&dkvpb.AuthChange{Change: &dkvpb.AuthChange_RoleAdd{RoleAdd: &dkvpb.RoleRequest{Name: name}}})
}

func rolePrefix(role, prefix string, t dkvpb.Permission_Type) *dkvpb.InternalRequest {
	s := auth.SpanOf([]byte(prefix), nil, true)
	return ach(&dkvpb.AuthChange{Change: &dkvpb.AuthChange_RoleGrant{RoleGrant: &dkvpb.RoleGrantPermissionRequest{
		Role: role, Permission: &dkvpb.Permission{Type: t, Key: s.Start, RangeEnd: s.End}}}})
}

func enable(key string) *dkvpb.InternalRequest {
	return ach(&dkvpb.AuthChange{Change: &dkvpb.AuthChange_Enable{Enable: &dkvpb.AuthEnableChange{SigningKey: []byte(key)}}})
}

const key32 = "0123456789abcdef0123456789abcdef"

// TestAuthEnableNeedsRoot: auth enable is refused until user root holds
// role root, and root then cannot be removed while auth is on.
func TestAuthEnableNeedsRoot(t *testing.T) {
	h := newHarness(t)
	if res := h.one(enable(key32)); !errors.Is(res.Err, dkverr.Sentinel(dkverr.InvalidInput)) {
		t.Fatalf("enable without root user: %v, want InvalidInput", res.Err)
	}
	h.ok(userAdd("root"))
	if res := h.one(enable(key32)); res.Err == nil {
		t.Fatal("enable with a root user lacking the root role succeeded")
	}
	h.ok(grantRole("root", "root"))
	if res := h.one(enable("short")); res.Err == nil {
		t.Fatal("enable with a short signing key succeeded")
	}
	h.ok(enable(key32))
	v := h.m.Auth().View()
	if !v.Enabled || string(v.SigningKey) != key32 {
		t.Fatalf("view after enable: enabled %v key %q", v.Enabled, v.SigningKey)
	}
	if u, _ := v.User("root"); u.Revision != v.Revision {
		t.Fatalf("root's revision %d after enable at %d: older tokens would still work", u.Revision, v.Revision)
	}
	// A second enable (another member's key) keeps the first key.
	h.ok(enable("ffffffffffffffffffffffffffffffff"))
	if string(h.m.Auth().View().SigningKey) != key32 {
		t.Fatal("signing key replaced by a later enable")
	}
	if res := h.one(revokeRole("root", "root")); res.Err == nil {
		t.Fatal("root role revoked from root while enabled")
	}
	if res := h.one(ach(&dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserDelete{UserDelete: &dkvpb.UserRequest{Name: "root"}}})); res.Err == nil {
		t.Fatal("root deleted while enabled")
	}
}

// TestAuthRevisions: every change bumps the auth revision; a role change
// bumps the revision of the users holding it (their tokens go stale) and
// of no one else; the view follows apply and a reopen.
func TestAuthRevisions(t *testing.T) {
	h := newHarness(t)
	h.ok(userAdd("alice"))
	h.ok(userAdd("bob"))
	h.ok(roleAdd("app"))
	h.ok(grantRole("alice", "app"))
	res := h.ok(rolePrefix("app", "app/", dkvpb.Permission_READWRITE))
	if got := res.Resp.(*dkvpb.AuthResponse).GetAuthRevision(); got != 5 {
		t.Fatalf("auth revision %d after 5 changes", got)
	}
	v := h.m.Auth().View()
	alice, _ := v.User("alice")
	bob, _ := v.User("bob")
	if alice.Revision != 5 || bob.Revision != 2 {
		t.Fatalf("alice rev %d (want 5), bob rev %d (want 2)", alice.Revision, bob.Revision)
	}
	if !alice.Allowed(auth.Read|auth.Write, auth.Key([]byte("app/x"))) || alice.Allowed(auth.Read, auth.Key([]byte("other/x"))) {
		t.Fatal("alice's permissions wrong")
	}
	if bob.Allowed(auth.Read, auth.Key([]byte("app/x"))) {
		t.Fatal("bob may read without a role")
	}
	if res := h.one(grantRole("alice", "nosuch")); !errors.Is(res.Err, dkverr.Sentinel(dkverr.NotFound)) {
		t.Fatalf("grant of a missing role: %v", res.Err)
	}
	if res := h.one(userAdd("alice")); !errors.Is(res.Err, dkverr.Sentinel(dkverr.Conflict)) {
		t.Fatalf("second user add: %v", res.Err)
	}
	h.ok(revokeRole("alice", "app"))
	alice, _ = h.m.Auth().View().User("alice")
	if alice.Allowed(auth.Read, auth.Key([]byte("app/x"))) || alice.Revision != 6 {
		t.Fatalf("after revoke: allowed, or rev %d != 6", alice.Revision)
	}
	// Reopen: the view is rebuilt from the stored state.
	before := stateContents(t, h.store.DB())
	h2 := openHarness(t, h.store)
	if a, _ := h2.m.Auth().View().User("alice"); a == nil || a.Revision != 6 {
		t.Fatal("auth state lost on reopen")
	}
	if !bytes.Equal(before, stateContents(t, h2.store.DB())) {
		t.Fatal("reopen changed state")
	}
}

// TestAuthDeterministic: the same auth changes give byte-identical state.
func TestAuthDeterministic(t *testing.T) {
	cmds := []*dkvpb.InternalRequest{userAdd("root"), userAdd("zed"), userAdd("alice"), roleAdd("b"), roleAdd("a"),
		grantRole("root", "root"), grantRole("zed", "b"), grantRole("zed", "a"), rolePrefix("a", "x/", dkvpb.Permission_READ),
		rolePrefix("a", "b/", dkvpb.Permission_WRITE), rolePrefix("a", "x/", dkvpb.Permission_READWRITE), enable(key32)}
	a, b := newHarness(t), newHarness(t)
	a.batch(clones(cmds)...)
	for _, c := range clones(cmds) {
		b.one(c)
	}
	if sa, sb := stateContents(t, a.store.DB()), stateContents(t, b.store.DB()); !bytes.Equal(sa, sb) {
		t.Fatalf("states differ:\n%s\n---\n%s", sa, sb)
	}
}

// TestStaleAuthRevisionRefused: a client command checked against an older
// auth state (a role revoked while it was in flight, or checked on a
// lagging member) is refused and writes nothing; member bookkeeping is
// not affected.
func TestStaleAuthRevisionRefused(t *testing.T) {
	h := newHarness(t)
	h.ok(put("a", "1", 0)) // auth revision 0 = state's 0
	h.ok(userAdd("alice")) // auth revision now 1
	res := h.one(put("a", "2", 0))
	if !errors.Is(res.Err, dkverr.Sentinel(dkverr.Unavailable)) {
		t.Fatalf("put checked at auth revision 0 applied at 1: %v, want Unavailable", res.Err)
	}
	stamped := put("a", "3", 0)
	stamped.AuthRevision = 1
	h.ok(stamped)
	h.ok(alarm(1, true)) // bookkeeping carries no auth revision
}

// TestAuthRestored: a snapshot replacing the state replaces the auth view
// too (the member would otherwise enforce the rules it had before).
func TestAuthRestored(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	a.ok(userAdd("alice"))
	a.ok(roleAdd("app"))
	a.ok(grantRole("alice", "app"))
	it, err := a.store.DB().NewIter(&pebble.IterOptions{LowerBound: keys.StateStart, UpperBound: keys.StateEnd})
	if err != nil {
		t.Fatal(err)
	}
	batch := b.store.DB().NewBatch()
	for it.First(); it.Valid(); it.Next() {
		if err := batch.Set(it.Key(), it.Value(), nil); err != nil {
			t.Fatal(err)
		}
	}
	it.Close()
	if err := batch.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.m.Auth().View().User("alice"); ok {
		t.Fatal("view changed before Restored")
	}
	if err := b.m.Restored(); err != nil {
		t.Fatal(err)
	}
	u, ok := b.m.Auth().View().User("alice")
	if !ok || len(u.Roles) != 1 || b.m.Auth().View().Revision != 3 {
		t.Fatalf("after Restored: alice %v %+v, revision %d", ok, u, b.m.Auth().View().Revision)
	}
	// And it applies on from the restored state, not the old one.
	if res := b.one(userAdd("alice")); !errors.Is(res.Err, dkverr.Sentinel(dkverr.Conflict)) {
		t.Fatalf("user add after restore: %v, want Conflict", res.Err)
	}
}

// as stamps req as a client command of user, checked at the current auth
// revision, as the proposing member does.
func (h *harness) as(user string, req *dkvpb.InternalRequest) *dkvpb.InternalRequest {
	req.User = user
	req.AuthRevision = h.m.Auth().View().Revision
	return req
}

// TestApplyLeaseOwnership: apply renews, revokes and
// attaches to a lease only for its owner or root, from the user stamped in
// the entry; a lease granted before auth was enabled is root's alone.
func TestApplyLeaseOwnership(t *testing.T) {
	h := newHarness(t)
	grant := func(id int64) *dkvpb.InternalRequest {
		return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: 60_000}}}
	}
	revoke := func(id int64) *dkvpb.InternalRequest {
		return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: id}}}
	}
	h.ok(grant(9)) // auth disabled: no owner
	for _, r := range []*dkvpb.InternalRequest{userAdd("root"), grantRole("root", "root"), userAdd("alice"), userAdd("bob"),
		roleAdd("rw"), rolePrefix("rw", "k", dkvpb.Permission_READWRITE), grantRole("alice", "rw"), grantRole("bob", "rw"), enable(key32)} {
		h.ok(r)
	}
	h.ok(h.as("alice", grant(1)))
	denied := func(what string, res Result) {
		t.Helper()
		if dkverr.CodeOf(res.Err) != dkverr.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", what, res.Err)
		}
	}
	denied("bob's put on alice's lease", h.one(h.as("bob", put("k", "v", 1))))
	denied("bob's put on the ownerless lease", h.one(h.as("bob", put("k", "v", 9))))
	denied("bob's revoke of alice's lease", h.one(h.as("bob", revoke(1))))
	renew := h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRenew{LeaseRenew: &dkvpb.LeaseRenewRequest{
		Ids: []int64{1, 1, 9, 9, 1}, Users: []string{"bob", "alice", "alice", "root", "root"}}}}).Resp.(*dkvpb.LeaseRenewResponse)
	if want := []bool{true, false, true, false, false}; !slices.Equal(renew.Denied, want) || renew.TtlMs[1] == 0 || renew.TtlMs[0] != 0 {
		t.Errorf("renewals by bob, alice, alice, root, root: denied %v ttls %v, want denied %v", renew.Denied, renew.TtlMs, want)
	}
	h.ok(h.as("alice", put("k", "v", 1)))
	h.ok(h.as("root", put("k2", "v", 9)))
	h.ok(h.as("root", put("k3", "v", 1)))
	h.ok(h.as("alice", revoke(1)))
	h.ok(h.as("root", revoke(9)))
}
