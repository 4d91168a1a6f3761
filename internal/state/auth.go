package state

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/storekeys"
	"google.golang.org/protobuf/proto"
)

// MinSigningKeyBytes is the shortest token signing key AuthEnable accepts.
const MinSigningKeyBytes = 32

// Auth is the replicated auth state as of the applied index. The apply
// goroutine changes it; any goroutine reads the current View with one
// atomic load.
type Auth struct {
	state  *dkvpb.AuthState       // apply goroutine only
	isRoot func(user string) bool // apply goroutine only; see rootTest
	view   atomic.Pointer[auth.View]
}

// View is the current auth view; never nil once the machine is built.
func (a *Auth) View() *auth.View { return a.view.Load() }

func (a *Auth) load(r pebble.Reader) error {
	st := &dkvpb.AuthState{}
	v, closer, err := r.Get(keys.AuthState)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return err
	default:
		err = proto.Unmarshal(v, st)
		closer.Close()
		if err != nil {
			return err
		}
	}
	a.state = st
	a.setView(auth.NewView(st))
	return nil
}

// An auth change: hashed on the receiving member (apply never hashes),
// checked by the Auth service itself.
var authCommand = Command{
	name: "auth",
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		arev, err := m.auth.apply(b, req.GetAuth())
		if err != nil {
			return m.refused(err)
		}
		return Result{Resp: &dkvpb.AuthResponse{Header: &dkvpb.ResponseHeader{}, AuthRevision: arev}, Revision: m.kv.Revision()}
	},
}

// rootTest is, with auth enabled, a test of whether a user has the root
// role in the applied auth state, for lease ownership (mvcc.SetCaller);
// nil with auth disabled, when leases are open to everyone.
func (a *Auth) rootTest() func(user string) bool { return a.isRoot }

// setView makes v the current view (apply goroutine only).
func (a *Auth) setView(v *auth.View) {
	a.view.Store(v)
	a.isRoot = nil
	if v.Enabled {
		a.isRoot = func(user string) bool {
			u, ok := v.User(user)
			return ok && u.Root
		}
	}
}

// checkFresh refuses a client command checked against another auth state
// than the one it applies in: deterministic (two revisions compared), and
// it closes the window between the check on the proposing member and the
// apply.
// Only for a checked command (Command.Checked).
func (a *Auth) checkFresh(req *dkvpb.InternalRequest) error {
	if cur := a.state.GetRevision(); req.GetAuthRevision() != cur {
		return dkverr.New(dkverr.Unavailable, "the auth state changed (revision %d, now %d) while the request was in flight; it was not applied and may be retried", req.GetAuthRevision(), cur)
	}
	return nil
}

// apply applies one auth change: on success the new state is written into
// b and becomes the view. It runs no bcrypt (hashes arrive computed) and
// iterates only sorted slices, so every member reaches the same bytes.
func (a *Auth) apply(b *pebble.Batch, ch *dkvpb.AuthChange) (uint64, error) {
	st := proto.Clone(a.state).(*dkvpb.AuthState)
	rev := st.GetRevision() + 1
	touched, err := change(st, ch, rev)
	if err != nil {
		return 0, err
	}
	st.Revision = rev
	for _, u := range st.Users {
		if touched(u) {
			u.Revision = rev
		}
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
	must(err)
	must(b.Set(keys.AuthState, data, nil))
	a.state = st
	a.setView(auth.NewView(st))
	return rev, nil
}

func findUser(st *dkvpb.AuthState, name string) (int, bool) {
	return slices.BinarySearchFunc(st.Users, name, func(u *dkvpb.AuthUser, n string) int { return cmpStr(u.GetName(), n) })
}

func findRole(st *dkvpb.AuthState, name string) (int, bool) {
	return slices.BinarySearchFunc(st.Roles, name, func(r *dkvpb.AuthRole, n string) int { return cmpStr(r.GetName(), n) })
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func hasRole(u *dkvpb.AuthUser, role string) bool {
	_, ok := slices.BinarySearch(u.Roles, role)
	return ok
}

func roleExists(st *dkvpb.AuthState, role string) bool {
	_, ok := findRole(st, role)
	return ok || role == auth.RootRole
}

func noOne(*dkvpb.AuthUser) bool { return false }

// change mutates st by ch and says which users it touched (their tokens
// stop being accepted).
func change(st *dkvpb.AuthState, ch *dkvpb.AuthChange, rev uint64) (func(*dkvpb.AuthUser) bool, error) {
	invalid := func(f string, a ...any) error { return dkverr.New(dkverr.InvalidInput, f, a...) }
	user := func(name string) (*dkvpb.AuthUser, error) {
		i, ok := findUser(st, name)
		if !ok {
			return nil, dkverr.New(dkverr.NotFound, "user %q does not exist", name)
		}
		return st.Users[i], nil
	}
	holds := func(role string) func(*dkvpb.AuthUser) bool {
		return func(u *dkvpb.AuthUser) bool { return hasRole(u, role) }
	}
	switch c := ch.GetChange().(type) {
	case *dkvpb.AuthChange_Enable:
		if !auth.NewView(st).HasRootUser() {
			return nil, invalid("auth enable needs a user %q holding the role %q: dkv user add root; dkv user grant-role root root", auth.RootUser, auth.RootRole)
		}
		if len(st.SigningKey) == 0 {
			if len(c.Enable.GetSigningKey()) < MinSigningKeyBytes {
				return nil, invalid("signing key of %d bytes, at least %d needed", len(c.Enable.GetSigningKey()), MinSigningKeyBytes)
			}
			st.SigningKey = c.Enable.GetSigningKey()
		}
		// Every token issued before (during an earlier enabled period)
		// stops working: enabling starts afresh.
		st.Enabled = true
		return func(*dkvpb.AuthUser) bool { return true }, nil
	case *dkvpb.AuthChange_Disable:
		st.Enabled = false
		return noOne, nil
	case *dkvpb.AuthChange_UserAdd:
		name := c.UserAdd.GetName()
		if name == "" {
			return nil, invalid("user name is empty")
		}
		i, ok := findUser(st, name)
		if ok {
			return nil, dkverr.New(dkverr.Conflict, "user %q already exists", name)
		}
		if len(c.UserAdd.GetPasswordHash()) == 0 && !c.UserAdd.GetNoPassword() {
			return nil, invalid("user %q: a password is required (or no_password)", name)
		}
		st.Users = slices.Insert(st.Users, i, &dkvpb.AuthUser{Name: name, PasswordHash: c.UserAdd.GetPasswordHash(), NoPassword: c.UserAdd.GetNoPassword(), Revision: rev})
		return noOne, nil
	case *dkvpb.AuthChange_UserDelete:
		name := c.UserDelete.GetName()
		if name == auth.RootUser && st.Enabled {
			return nil, invalid("user %q cannot be deleted while auth is enabled", name)
		}
		i, ok := findUser(st, name)
		if !ok {
			return nil, dkverr.New(dkverr.NotFound, "user %q does not exist", name)
		}
		st.Users = slices.Delete(st.Users, i, i+1)
		return noOne, nil
	case *dkvpb.AuthChange_UserPassword:
		u, err := user(c.UserPassword.GetName())
		if err != nil {
			return nil, err
		}
		if len(c.UserPassword.GetPasswordHash()) == 0 {
			return nil, invalid("password is empty")
		}
		u.PasswordHash, u.NoPassword = c.UserPassword.GetPasswordHash(), false
		return func(x *dkvpb.AuthUser) bool { return x == u }, nil
	case *dkvpb.AuthChange_UserGrantRole:
		u, err := user(c.UserGrantRole.GetUser())
		if err != nil {
			return nil, err
		}
		role := c.UserGrantRole.GetRole()
		if !roleExists(st, role) {
			return nil, dkverr.New(dkverr.NotFound, "role %q does not exist", role)
		}
		if i, ok := slices.BinarySearch(u.Roles, role); !ok {
			u.Roles = slices.Insert(u.Roles, i, role)
		}
		return func(x *dkvpb.AuthUser) bool { return x == u }, nil
	case *dkvpb.AuthChange_UserRevokeRole:
		u, err := user(c.UserRevokeRole.GetUser())
		if err != nil {
			return nil, err
		}
		role := c.UserRevokeRole.GetRole()
		if u.GetName() == auth.RootUser && role == auth.RootRole && st.Enabled {
			return nil, invalid("the role %q cannot be revoked from user %q while auth is enabled", role, u.GetName())
		}
		i, ok := slices.BinarySearch(u.Roles, role)
		if !ok {
			return nil, dkverr.New(dkverr.NotFound, "user %q does not hold role %q", u.GetName(), role)
		}
		u.Roles = slices.Delete(u.Roles, i, i+1)
		return func(x *dkvpb.AuthUser) bool { return x == u }, nil
	case *dkvpb.AuthChange_RoleAdd:
		name := c.RoleAdd.GetName()
		if name == "" {
			return nil, invalid("role name is empty")
		}
		i, ok := findRole(st, name)
		if ok || name == auth.RootRole {
			return nil, dkverr.New(dkverr.Conflict, "role %q already exists", name)
		}
		st.Roles = slices.Insert(st.Roles, i, &dkvpb.AuthRole{Name: name})
		return noOne, nil
	case *dkvpb.AuthChange_RoleDelete:
		name := c.RoleDelete.GetName()
		if name == auth.RootRole {
			return nil, invalid("the built-in role %q cannot be deleted", name)
		}
		i, ok := findRole(st, name)
		if !ok {
			return nil, dkverr.New(dkverr.NotFound, "role %q does not exist", name)
		}
		st.Roles = slices.Delete(st.Roles, i, i+1)
		var was []*dkvpb.AuthUser
		for _, u := range st.Users {
			if j, ok := slices.BinarySearch(u.Roles, name); ok {
				u.Roles = slices.Delete(u.Roles, j, j+1)
				was = append(was, u)
			}
		}
		return func(x *dkvpb.AuthUser) bool { return slices.Contains(was, x) }, nil
	case *dkvpb.AuthChange_RoleGrant:
		name := c.RoleGrant.GetRole()
		if name == auth.RootRole {
			return nil, invalid("the role %q may already do everything", name)
		}
		i, ok := findRole(st, name)
		if !ok {
			return nil, dkverr.New(dkverr.NotFound, "role %q does not exist", name)
		}
		p := c.RoleGrant.GetPermission()
		if p == nil || len(p.GetKey()) == 0 && len(p.GetRangeEnd()) == 0 {
			return nil, invalid("permission needs a key (use range end \"\\0\" from the empty key for every key)")
		}
		if p.GetStore() != "" {
			if err := storekeys.ValidName(p.GetStore()); err != nil {
				return nil, err
			}
		}
		r := st.Roles[i]
		j, found := slices.BinarySearchFunc(r.Permissions, p, cmpPerm)
		if found {
			r.Permissions[j].Type = p.GetType()
		} else {
			r.Permissions = slices.Insert(r.Permissions, j, proto.Clone(p).(*dkvpb.Permission))
		}
		return holds(name), nil
	case *dkvpb.AuthChange_RoleRevoke:
		name := c.RoleRevoke.GetRole()
		i, ok := findRole(st, name)
		if !ok {
			return nil, dkverr.New(dkverr.NotFound, "role %q does not exist", name)
		}
		r := st.Roles[i]
		p := &dkvpb.Permission{Key: c.RoleRevoke.GetKey(), RangeEnd: c.RoleRevoke.GetRangeEnd(), Store: c.RoleRevoke.GetStore()}
		j, found := slices.BinarySearchFunc(r.Permissions, p, cmpPerm)
		if !found {
			return nil, dkverr.New(dkverr.NotFound, "role %q has no permission on %s", name, auth.PermSpan(p))
		}
		r.Permissions = slices.Delete(r.Permissions, j, j+1)
		return holds(name), nil
	}
	return nil, invalid("unknown auth change %T", ch.GetChange())
}

// cmpPerm orders a role's permissions by key, then range end.
func cmpPerm(a, b *dkvpb.Permission) int {
	// The default store's "" first: permissions stored before named
	// stores existed keep their order.
	if c := strings.Compare(a.GetStore(), b.GetStore()); c != 0 {
		return c
	}
	if c := bytes.Compare(a.GetKey(), b.GetKey()); c != 0 {
		return c
	}
	return bytes.Compare(a.GetRangeEnd(), b.GetRangeEnd())
}
