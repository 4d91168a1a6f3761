package etcdapi

import (
	"context"
	"errors"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// authServer is etcd's Auth service over DKV's: the same users, roles
// and permissions (etcd's permission types and key/range_end rules are
// DKV's), and the token Authenticate returns is DKV's, which clientv3
// sends back as its "token" metadata.
type authServer struct {
	etcdserverpb.UnimplementedAuthServer
	d Deps
}

// authCall runs the DKV auth call method and maps DKV's refusals onto
// etcd's auth errors.
func authCall[R any](ctx context.Context, a *authServer, method string, req any, fn func(context.Context) (R, error)) (R, error) {
	out, err := call(ctx, a.d, method, req, fn)
	if err != nil {
		var zero R
		return zero, authErr(err)
	}
	return out, nil
}

func authErr(err error) error {
	de, ok := dkvErr(err)
	if !ok {
		return toEtcdErr(err)
	}
	m := de.Msg
	switch de.Code {
	case dkverr.Conflict:
		switch {
		case strings.HasPrefix(m, "user ") && strings.HasSuffix(m, "already exists"):
			return rpctypes.ErrGRPCUserAlreadyExist
		case strings.HasPrefix(m, "role ") && strings.HasSuffix(m, "already exists"):
			return rpctypes.ErrGRPCRoleAlreadyExist
		}
	case dkverr.NotFound:
		switch {
		case strings.Contains(m, "does not hold role"):
			return rpctypes.ErrGRPCRoleNotGranted
		case strings.Contains(m, "has no permission on"):
			return rpctypes.ErrGRPCPermissionNotGranted
		case strings.HasPrefix(m, "user "):
			return rpctypes.ErrGRPCUserNotFound
		case strings.HasPrefix(m, "role "):
			return rpctypes.ErrGRPCRoleNotFound
		}
	case dkverr.InvalidInput:
		if strings.HasPrefix(m, "auth enable needs a user") {
			return rpctypes.ErrGRPCRootUserNotExist
		}
	}
	return toEtcdErr(err)
}

func (a *authServer) authResp(r *dkvpb.AuthResponse) *etcdserverpb.ResponseHeader {
	return toHeader(r.GetHeader())
}

// Authenticate answers etcd's "authentication is not enabled" while auth
// is off, as etcd does (clientv3 then sends no token).
func (a *authServer) Authenticate(ctx context.Context, r *etcdserverpb.AuthenticateRequest) (*etcdserverpb.AuthenticateResponse, error) {
	req := &dkvpb.AuthenticateRequest{Name: r.Name, Password: r.Password}
	resp, err := authCall(ctx, a, dkvpb.Auth_Authenticate_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthenticateResponse, error) {
		return a.d.Auth.Authenticate(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	if resp.GetToken() == "" {
		return nil, rpctypes.ErrGRPCAuthNotEnabled
	}
	return &etcdserverpb.AuthenticateResponse{Header: toHeader(resp.GetHeader()), Token: resp.GetToken()}, nil
}

func (a *authServer) AuthEnable(ctx context.Context, _ *etcdserverpb.AuthEnableRequest) (*etcdserverpb.AuthEnableResponse, error) {
	req := &dkvpb.AuthEnableRequest{}
	resp, err := authCall(ctx, a, dkvpb.Auth_AuthEnable_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.AuthEnable(ctx, req)
	})
	if errors.Is(err, rpctypes.ErrGRPCRootUserNotExist) && a.rootUserExists(ctx) {
		// etcd tells a root user without the root role apart; etcdctl
		// auth enable then grants the role and enables again.
		err = rpctypes.ErrGRPCRootRoleNotExist
	}
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthEnableResponse{Header: a.authResp(resp)}, nil
}

// rootUserExists reports whether DKV has the user root, asked with the
// caller's credentials (auth enable is root's call, so it may ask).
func (a *authServer) rootUserExists(ctx context.Context) bool {
	req := &dkvpb.UserRequest{Name: auth.RootUser}
	_, err := call(ctx, a.d, dkvpb.Auth_UserGet_FullMethodName, req, func(ctx context.Context) (*dkvpb.UserGetResponse, error) {
		return a.d.Auth.UserGet(ctx, req)
	})
	return err == nil
}

func (a *authServer) AuthDisable(ctx context.Context, _ *etcdserverpb.AuthDisableRequest) (*etcdserverpb.AuthDisableResponse, error) {
	req := &dkvpb.AuthDisableRequest{}
	resp, err := authCall(ctx, a, dkvpb.Auth_AuthDisable_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.AuthDisable(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthDisableResponse{Header: a.authResp(resp)}, nil
}

func (a *authServer) AuthStatus(ctx context.Context, _ *etcdserverpb.AuthStatusRequest) (*etcdserverpb.AuthStatusResponse, error) {
	req := &dkvpb.AuthStatusRequest{}
	resp, err := authCall(ctx, a, dkvpb.Auth_AuthStatus_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthStatusResponse, error) {
		return a.d.Auth.AuthStatus(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthStatusResponse{Header: toHeader(resp.GetHeader()), Enabled: resp.GetEnabled(), AuthRevision: resp.GetAuthRevision()}, nil
}

// authChange runs a DKV auth call that answers an AuthResponse.
func (a *authServer) authChange(ctx context.Context, method string, req any, fn func(context.Context) (*dkvpb.AuthResponse, error)) (*etcdserverpb.ResponseHeader, error) {
	resp, err := authCall(ctx, a, method, req, fn)
	if err != nil {
		return nil, err
	}
	return a.authResp(resp), nil
}

// UserAdd refuses etcd's pre-hashed password (hashedPassword, etcdctl
// --new-user-password with a hash): DKV hashes passwords itself.
func (a *authServer) UserAdd(ctx context.Context, r *etcdserverpb.AuthUserAddRequest) (*etcdserverpb.AuthUserAddResponse, error) {
	if r.Name == "" {
		return nil, rpctypes.ErrGRPCUserEmpty
	}
	if r.HashedPassword != "" {
		return nil, status.Errorf(codes.InvalidArgument, "%sa pre-hashed password is not accepted by DKV; send the password", etcdPrefix)
	}
	req := &dkvpb.UserAddRequest{Name: r.Name, Password: r.Password, NoPassword: r.GetOptions().GetNoPassword()}
	h, err := a.authChange(ctx, dkvpb.Auth_UserAdd_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.UserAdd(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthUserAddResponse{Header: h}, nil
}

func (a *authServer) UserGet(ctx context.Context, r *etcdserverpb.AuthUserGetRequest) (*etcdserverpb.AuthUserGetResponse, error) {
	req := &dkvpb.UserRequest{Name: r.Name}
	resp, err := authCall(ctx, a, dkvpb.Auth_UserGet_FullMethodName, req, func(ctx context.Context) (*dkvpb.UserGetResponse, error) {
		return a.d.Auth.UserGet(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthUserGetResponse{Header: toHeader(resp.GetHeader()), Roles: resp.GetRoles()}, nil
}

func (a *authServer) UserList(ctx context.Context, _ *etcdserverpb.AuthUserListRequest) (*etcdserverpb.AuthUserListResponse, error) {
	req := &dkvpb.UserListRequest{}
	resp, err := authCall(ctx, a, dkvpb.Auth_UserList_FullMethodName, req, func(ctx context.Context) (*dkvpb.UserListResponse, error) {
		return a.d.Auth.UserList(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthUserListResponse{Header: toHeader(resp.GetHeader()), Users: resp.GetUsers()}, nil
}

func (a *authServer) UserDelete(ctx context.Context, r *etcdserverpb.AuthUserDeleteRequest) (*etcdserverpb.AuthUserDeleteResponse, error) {
	req := &dkvpb.UserRequest{Name: r.Name}
	h, err := a.authChange(ctx, dkvpb.Auth_UserDelete_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.UserDelete(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthUserDeleteResponse{Header: h}, nil
}

func (a *authServer) UserChangePassword(ctx context.Context, r *etcdserverpb.AuthUserChangePasswordRequest) (*etcdserverpb.AuthUserChangePasswordResponse, error) {
	if r.HashedPassword != "" {
		return nil, status.Errorf(codes.InvalidArgument, "%sa pre-hashed password is not accepted by DKV; send the password", etcdPrefix)
	}
	req := &dkvpb.UserChangePasswordRequest{Name: r.Name, Password: r.Password}
	h, err := a.authChange(ctx, dkvpb.Auth_UserChangePassword_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.UserChangePassword(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthUserChangePasswordResponse{Header: h}, nil
}

func (a *authServer) UserGrantRole(ctx context.Context, r *etcdserverpb.AuthUserGrantRoleRequest) (*etcdserverpb.AuthUserGrantRoleResponse, error) {
	req := &dkvpb.UserRoleRequest{User: r.User, Role: r.Role}
	h, err := a.authChange(ctx, dkvpb.Auth_UserGrantRole_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.UserGrantRole(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthUserGrantRoleResponse{Header: h}, nil
}

func (a *authServer) UserRevokeRole(ctx context.Context, r *etcdserverpb.AuthUserRevokeRoleRequest) (*etcdserverpb.AuthUserRevokeRoleResponse, error) {
	req := &dkvpb.UserRoleRequest{User: r.Name, Role: r.Role}
	h, err := a.authChange(ctx, dkvpb.Auth_UserRevokeRole_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.UserRevokeRole(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthUserRevokeRoleResponse{Header: h}, nil
}

func (a *authServer) RoleAdd(ctx context.Context, r *etcdserverpb.AuthRoleAddRequest) (*etcdserverpb.AuthRoleAddResponse, error) {
	if r.Name == "" {
		return nil, rpctypes.ErrGRPCRoleEmpty
	}
	req := &dkvpb.RoleRequest{Name: r.Name}
	h, err := a.authChange(ctx, dkvpb.Auth_RoleAdd_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.RoleAdd(ctx, req)
	})
	if r.Name == auth.RootRole && errors.Is(err, rpctypes.ErrGRPCRoleAlreadyExist) {
		// DKV's role root is built in, etcd's is added (etcdctl auth
		// enable adds it): adding it is a no-op that succeeds.
		return &etcdserverpb.AuthRoleAddResponse{Header: toHeader(a.d.Header())}, nil
	}
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthRoleAddResponse{Header: h}, nil
}

func (a *authServer) RoleGet(ctx context.Context, r *etcdserverpb.AuthRoleGetRequest) (*etcdserverpb.AuthRoleGetResponse, error) {
	req := &dkvpb.RoleRequest{Name: r.Role}
	resp, err := authCall(ctx, a, dkvpb.Auth_RoleGet_FullMethodName, req, func(ctx context.Context) (*dkvpb.RoleGetResponse, error) {
		return a.d.Auth.RoleGet(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	out := &etcdserverpb.AuthRoleGetResponse{Header: toHeader(resp.GetHeader())}
	for _, p := range resp.GetPermissions() {
		out.Perm = append(out.Perm, &authpb.Permission{PermType: authpb.Permission_Type(p.GetType()), Key: p.GetKey(), RangeEnd: p.GetRangeEnd()})
	}
	return out, nil
}

func (a *authServer) RoleList(ctx context.Context, _ *etcdserverpb.AuthRoleListRequest) (*etcdserverpb.AuthRoleListResponse, error) {
	req := &dkvpb.RoleListRequest{}
	resp, err := authCall(ctx, a, dkvpb.Auth_RoleList_FullMethodName, req, func(ctx context.Context) (*dkvpb.RoleListResponse, error) {
		return a.d.Auth.RoleList(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthRoleListResponse{Header: toHeader(resp.GetHeader()), Roles: resp.GetRoles()}, nil
}

func (a *authServer) RoleDelete(ctx context.Context, r *etcdserverpb.AuthRoleDeleteRequest) (*etcdserverpb.AuthRoleDeleteResponse, error) {
	req := &dkvpb.RoleRequest{Name: r.Role}
	h, err := a.authChange(ctx, dkvpb.Auth_RoleDelete_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.RoleDelete(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthRoleDeleteResponse{Header: h}, nil
}

// RoleGrantPermission takes etcd's key and range_end as they are: an
// empty range_end is the one key, "\x00" every key from key on, the
// same rules DKV's permissions follow.
func (a *authServer) RoleGrantPermission(ctx context.Context, r *etcdserverpb.AuthRoleGrantPermissionRequest) (*etcdserverpb.AuthRoleGrantPermissionResponse, error) {
	if r.Perm == nil {
		return nil, rpctypes.ErrGRPCPermissionNotGiven
	}
	if _, ok := dkvpb.Permission_Type_name[int32(r.Perm.PermType)]; !ok {
		return nil, status.Errorf(codes.InvalidArgument, "%spermission type %d is not READ, WRITE or READWRITE", etcdPrefix, r.Perm.PermType)
	}
	req := &dkvpb.RoleGrantPermissionRequest{Role: r.Name, Permission: &dkvpb.Permission{
		Type: dkvpb.Permission_Type(r.Perm.PermType), Key: r.Perm.Key, RangeEnd: r.Perm.RangeEnd,
	}}
	h, err := a.authChange(ctx, dkvpb.Auth_RoleGrantPermission_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.RoleGrantPermission(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthRoleGrantPermissionResponse{Header: h}, nil
}

func (a *authServer) RoleRevokePermission(ctx context.Context, r *etcdserverpb.AuthRoleRevokePermissionRequest) (*etcdserverpb.AuthRoleRevokePermissionResponse, error) {
	req := &dkvpb.RoleRevokePermissionRequest{Role: r.Role, Key: r.Key, RangeEnd: r.RangeEnd}
	h, err := a.authChange(ctx, dkvpb.Auth_RoleRevokePermission_FullMethodName, req, func(ctx context.Context) (*dkvpb.AuthResponse, error) {
		return a.d.Auth.RoleRevokePermission(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.AuthRoleRevokePermissionResponse{Header: h}, nil
}
