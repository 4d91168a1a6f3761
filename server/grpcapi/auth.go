package grpcapi

import (
	"context"
	"crypto/rand"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"
)

// authService implements dkvpb.AuthServer. Changes are hashed (bcrypt)
// here, on the receiving member, and proposed with the hash; apply never
// hashes. Reads answer from the view after a linearizable wait.
type authService struct {
	dkvpb.UnimplementedAuthServer
	a *API
}

func (a *authService) view(ctx context.Context) (*auth.View, error) {
	if err := a.a.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	return a.a.n.AuthView(), nil
}

func (a *authService) hash(pw string) ([]byte, error) {
	if pw == "" {
		return nil, dkverr.New(dkverr.InvalidInput, "password is empty")
	}
	if len(pw) > 72 {
		return nil, dkverr.New(dkverr.InvalidInput, "password is %d bytes; at most 72 (bcrypt's limit)", len(pw))
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), a.a.o.AuthBcryptCost)
	if err != nil {
		return nil, dkverr.New(dkverr.InvalidInput, "hash password: %v", err)
	}
	return h, nil
}

func (a *authService) Authenticate(ctx context.Context, req *dkvpb.AuthenticateRequest) (*dkvpb.AuthenticateResponse, error) {
	v, err := a.view(ctx)
	if err != nil {
		return nil, err
	}
	if !v.Enabled {
		// No token is needed; the client sends none.
		return &dkvpb.AuthenticateResponse{Header: a.a.n.Header(0)}, nil
	}
	u, err := a.a.m.Login(ctx, v, req.GetName(), req.GetPassword())
	if err != nil {
		return nil, err
	}
	exp := time.Now().Add(a.a.o.AuthTokenTTL)
	tok, err := auth.Sign(v.SigningKey, u.Name, v.Revision, exp)
	if err != nil {
		return nil, err
	}
	return &dkvpb.AuthenticateResponse{Header: a.a.n.Header(0), Token: tok, ExpiresUnix: exp.Unix()}, nil
}

func (a *authService) AuthEnable(ctx context.Context, _ *dkvpb.AuthEnableRequest) (*dkvpb.AuthResponse, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return a.a.m.ChangeAuth(ctx, "AuthEnable", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_Enable{Enable: &dkvpb.AuthEnableChange{SigningKey: key}}})
}

func (a *authService) AuthDisable(ctx context.Context, req *dkvpb.AuthDisableRequest) (*dkvpb.AuthResponse, error) {
	return a.a.m.ChangeAuth(ctx, "AuthDisable", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_Disable{Disable: req}})
}

func (a *authService) AuthStatus(ctx context.Context, _ *dkvpb.AuthStatusRequest) (*dkvpb.AuthStatusResponse, error) {
	v, err := a.view(ctx)
	if err != nil {
		return nil, err
	}
	return &dkvpb.AuthStatusResponse{Header: a.a.n.Header(0), Enabled: v.Enabled, AuthRevision: v.Revision}, nil
}

func (a *authService) UserAdd(ctx context.Context, req *dkvpb.UserAddRequest) (*dkvpb.AuthResponse, error) {
	ch := &dkvpb.UserAddChange{Name: req.GetName(), NoPassword: req.GetNoPassword()}
	if !req.GetNoPassword() {
		h, err := a.hash(req.GetPassword())
		if err != nil {
			return nil, err
		}
		ch.PasswordHash = h
	}
	return a.a.m.ChangeAuth(ctx, "UserAdd", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserAdd{UserAdd: ch}})
}

func (a *authService) UserDelete(ctx context.Context, req *dkvpb.UserRequest) (*dkvpb.AuthResponse, error) {
	return a.a.m.ChangeAuth(ctx, "UserDelete", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserDelete{UserDelete: req}})
}

func (a *authService) UserChangePassword(ctx context.Context, req *dkvpb.UserChangePasswordRequest) (*dkvpb.AuthResponse, error) {
	h, err := a.hash(req.GetPassword())
	if err != nil {
		return nil, err
	}
	return a.a.m.ChangeAuth(ctx, "UserChangePassword", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserPassword{UserPassword: &dkvpb.UserPasswordChange{Name: req.GetName(), PasswordHash: h}}})
}

func (a *authService) UserGrantRole(ctx context.Context, req *dkvpb.UserRoleRequest) (*dkvpb.AuthResponse, error) {
	return a.a.m.ChangeAuth(ctx, "UserGrantRole", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserGrantRole{UserGrantRole: req}})
}

func (a *authService) UserRevokeRole(ctx context.Context, req *dkvpb.UserRoleRequest) (*dkvpb.AuthResponse, error) {
	return a.a.m.ChangeAuth(ctx, "UserRevokeRole", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_UserRevokeRole{UserRevokeRole: req}})
}

func (a *authService) RoleAdd(ctx context.Context, req *dkvpb.RoleRequest) (*dkvpb.AuthResponse, error) {
	return a.a.m.ChangeAuth(ctx, "RoleAdd", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_RoleAdd{RoleAdd: req}})
}

func (a *authService) RoleDelete(ctx context.Context, req *dkvpb.RoleRequest) (*dkvpb.AuthResponse, error) {
	return a.a.m.ChangeAuth(ctx, "RoleDelete", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_RoleDelete{RoleDelete: req}})
}

func (a *authService) RoleGrantPermission(ctx context.Context, req *dkvpb.RoleGrantPermissionRequest) (*dkvpb.AuthResponse, error) {
	p := proto.Clone(req.GetPermission()).(*dkvpb.Permission)
	if p == nil {
		return nil, dkverr.New(dkverr.InvalidInput, "no permission given")
	}
	var err error
	if p.Key, p.RangeEnd, err = normalizePerm(p.GetKey(), p.GetRangeEnd(), req.GetPrefix()); err != nil {
		return nil, err
	}
	return a.a.m.ChangeAuth(ctx, "RoleGrantPermission", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_RoleGrant{RoleGrant: &dkvpb.RoleGrantPermissionRequest{Role: req.GetRole(), Permission: p}}})
}

func (a *authService) RoleRevokePermission(ctx context.Context, req *dkvpb.RoleRevokePermissionRequest) (*dkvpb.AuthResponse, error) {
	k, e, err := normalizePerm(req.GetKey(), req.GetRangeEnd(), req.GetPrefix())
	if err != nil {
		return nil, err
	}
	return a.a.m.ChangeAuth(ctx, "RoleRevokePermission", &dkvpb.AuthChange{Change: &dkvpb.AuthChange_RoleRevoke{RoleRevoke: &dkvpb.RoleRevokePermissionRequest{Role: req.GetRole(), Key: k, RangeEnd: e, Store: req.GetStore()}}})
}

// normalizePerm turns a prefix into its range end ("\0" for a prefix with
// no end: the empty prefix or one of 0xff bytes), so a permission is
// always stored as key and range end.
func normalizePerm(key, end []byte, prefix bool) ([]byte, []byte, error) {
	if !prefix {
		return key, end, nil
	}
	if len(end) > 0 {
		return nil, nil, dkverr.New(dkverr.InvalidInput, "a prefix permission takes no range end")
	}
	sp := auth.SpanOf(key, nil, true)
	if sp.End == nil {
		return key, []byte{0}, nil
	}
	return key, sp.End, nil
}

func (a *authService) UserGet(ctx context.Context, req *dkvpb.UserRequest) (*dkvpb.UserGetResponse, error) {
	v, err := a.view(ctx)
	if err != nil {
		return nil, err
	}
	u, ok := v.User(req.GetName())
	if !ok {
		return nil, dkverr.New(dkverr.NotFound, "user %q does not exist", req.GetName())
	}
	return &dkvpb.UserGetResponse{Header: a.a.n.Header(0), Name: u.Name, Roles: u.Roles}, nil
}

func (a *authService) UserList(ctx context.Context, _ *dkvpb.UserListRequest) (*dkvpb.UserListResponse, error) {
	if _, err := a.view(ctx); err != nil {
		return nil, err
	}
	st := a.a.n.AuthView().State
	resp := &dkvpb.UserListResponse{Header: a.a.n.Header(0)}
	for _, u := range st.GetUsers() {
		resp.Users = append(resp.Users, u.GetName())
	}
	return resp, nil
}

func (a *authService) RoleGet(ctx context.Context, req *dkvpb.RoleRequest) (*dkvpb.RoleGetResponse, error) {
	if _, err := a.view(ctx); err != nil {
		return nil, err
	}
	if req.GetName() == auth.RootRole {
		return &dkvpb.RoleGetResponse{Header: a.a.n.Header(0), Name: auth.RootRole}, nil
	}
	for _, r := range a.a.n.AuthView().State.GetRoles() {
		if r.GetName() == req.GetName() {
			return &dkvpb.RoleGetResponse{Header: a.a.n.Header(0), Name: r.GetName(), Permissions: r.GetPermissions()}, nil
		}
	}
	return nil, dkverr.New(dkverr.NotFound, "role %q does not exist", req.GetName())
}

func (a *authService) RoleList(ctx context.Context, _ *dkvpb.RoleListRequest) (*dkvpb.RoleListResponse, error) {
	if _, err := a.view(ctx); err != nil {
		return nil, err
	}
	resp := &dkvpb.RoleListResponse{Header: a.a.n.Header(0), Roles: []string{auth.RootRole}}
	for _, r := range a.a.n.AuthView().State.GetRoles() {
		resp.Roles = append(resp.Roles, r.GetName())
	}
	return resp, nil
}
