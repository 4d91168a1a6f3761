package auth

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// RootUser and RootRole are built in: the role root may do everything,
// and auth cannot be enabled until a user root holding it exists.
const (
	RootUser = "root"
	RootRole = "root"
)

// Perm is what a request needs on a span.
type Perm uint8

const (
	Read Perm = 1 << iota
	Write
)

func (p Perm) String() string {
	switch p {
	case Read:
		return "read"
	case Write:
		return "write"
	case Read | Write:
		return "readwrite"
	}
	return "none"
}

// View is an immutable in-memory picture of the replicated auth state,
// built once per auth change and shared by every request: checking a
// request costs map lookups and binary searches, never a raft round or a
// disk read.
type View struct {
	Enabled    bool
	Revision   uint64
	SigningKey []byte
	// State is the state the view was built from; read only.
	State *dkvpb.AuthState
	users map[string]*User
}

// User is one user as the view sees it: its effective permissions are the
// union of its roles', merged per kind.
type User struct {
	Name         string
	Revision     uint64
	Root         bool
	PasswordHash []byte
	NoPassword   bool
	Roles        []string
	read, write  []Span
}

// NewView builds the view of st (nil: auth never configured).
func NewView(st *dkvpb.AuthState) *View {
	v := &View{users: map[string]*User{}}
	if st == nil {
		return v
	}
	v.Enabled, v.Revision, v.SigningKey, v.State = st.GetEnabled(), st.GetRevision(), st.GetSigningKey(), st
	roles := map[string]*dkvpb.AuthRole{}
	for _, r := range st.GetRoles() {
		roles[r.GetName()] = r
	}
	for _, su := range st.GetUsers() {
		u := &User{Name: su.GetName(), Revision: su.GetRevision(), PasswordHash: su.GetPasswordHash(),
			NoPassword: su.GetNoPassword(), Roles: su.GetRoles()}
		var rd, wr []Span
		for _, rn := range su.GetRoles() {
			if rn == RootRole {
				u.Root = true
			}
			for _, p := range roles[rn].GetPermissions() {
				s, ok := StoreSpan(p)
				if !ok {
					continue
				}
				switch p.GetType() {
				case dkvpb.Permission_READ:
					rd = append(rd, s)
				case dkvpb.Permission_WRITE:
					wr = append(wr, s)
				case dkvpb.Permission_READWRITE:
					rd, wr = append(rd, s), append(wr, s)
				}
			}
		}
		u.read, u.write = Merge(rd), Merge(wr)
		v.users[u.Name] = u
	}
	return v
}

// PermSpan is the span a stored permission covers.
func PermSpan(p *dkvpb.Permission) Span { return SpanOf(p.GetKey(), p.GetRangeEnd(), false) }

// User returns the user called name.
func (v *View) User(name string) (*User, bool) {
	u, ok := v.users[name]
	return u, ok
}

// HasRootUser reports whether a user root holding the role root exists:
// the condition for enabling auth.
func (v *View) HasRootUser() bool {
	u, ok := v.users[RootUser]
	return ok && u.Root
}

// Allowed reports whether u may do p on every key of s.
func (u *User) Allowed(p Perm, s Span) bool {
	if u.Root {
		return true
	}
	if p&Read != 0 && !Covers(u.read, s) {
		return false
	}
	if p&Write != 0 && !Covers(u.write, s) {
		return false
	}
	return true
}
