package client

import (
	"context"
	"errors"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Auth manages users, roles and permissions (root only once auth is
// enabled). See docs/security.md.
type Auth interface {
	// AuthEnable turns auth on; refused until user root holds role root.
	AuthEnable(ctx context.Context) error
	// AuthDisable turns auth off.
	AuthDisable(ctx context.Context) error
	// AuthStatus reports whether auth is on and the auth revision.
	AuthStatus(ctx context.Context) (*dkvpb.AuthStatusResponse, error)
	// UserAdd adds a user with a password ("" makes a user that cannot
	// authenticate with one, for client-certificate users).
	UserAdd(ctx context.Context, name, password string) error
	UserDelete(ctx context.Context, name string) error
	UserGet(ctx context.Context, name string) (*dkvpb.UserGetResponse, error)
	UserList(ctx context.Context) ([]string, error)
	UserChangePassword(ctx context.Context, name, password string) error
	UserGrantRole(ctx context.Context, user, role string) error
	UserRevokeRole(ctx context.Context, user, role string) error
	RoleAdd(ctx context.Context, name string) error
	RoleDelete(ctx context.Context, name string) error
	RoleGet(ctx context.Context, name string) (*dkvpb.RoleGetResponse, error)
	RoleList(ctx context.Context) ([]string, error)
	// RoleGrantPermission allows role to read, write or both on key, on
	// [key, end) with a non-empty end ("\x00": every key >= key), or on
	// every key starting with key when prefix is set.
	RoleGrantPermission(ctx context.Context, role string, perm dkvpb.Permission_Type, key, end string, prefix bool) error
	// RoleRevokePermission removes the permission granted with the same
	// key, end and prefix.
	RoleRevokePermission(ctx context.Context, role, key, end string, prefix bool) error
}

var _ Auth = (*Client)(nil)

func (c *Client) authCall(ctx context.Context, write bool, rpc func(context.Context, ...grpc.CallOption) error) error {
	return c.call(ctx, write, rpc)
}

func (c *Client) AuthEnable(ctx context.Context) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.AuthEnable(ctx, &dkvpb.AuthEnableRequest{}, o...)
		return err
	})
}

func (c *Client) AuthDisable(ctx context.Context) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.AuthDisable(ctx, &dkvpb.AuthDisableRequest{}, o...)
		return err
	})
}

func (c *Client) AuthStatus(ctx context.Context) (resp *dkvpb.AuthStatusResponse, err error) {
	err = c.authCall(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.auth.AuthStatus(ctx, &dkvpb.AuthStatusRequest{}, o...)
		return err
	})
	return resp, err
}

func (c *Client) UserAdd(ctx context.Context, name, password string) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.UserAdd(ctx, &dkvpb.UserAddRequest{Name: name, Password: password, NoPassword: password == ""}, o...)
		return err
	})
}

func (c *Client) UserDelete(ctx context.Context, name string) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.UserDelete(ctx, &dkvpb.UserRequest{Name: name}, o...)
		return err
	})
}

func (c *Client) UserGet(ctx context.Context, name string) (resp *dkvpb.UserGetResponse, err error) {
	err = c.authCall(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.auth.UserGet(ctx, &dkvpb.UserRequest{Name: name}, o...)
		return err
	})
	return resp, err
}

func (c *Client) UserList(ctx context.Context) (users []string, err error) {
	err = c.authCall(ctx, false, func(ctx context.Context, o ...grpc.CallOption) error {
		resp, err := c.auth.UserList(ctx, &dkvpb.UserListRequest{}, o...)
		users = resp.GetUsers()
		return err
	})
	return users, err
}

func (c *Client) UserChangePassword(ctx context.Context, name, password string) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.UserChangePassword(ctx, &dkvpb.UserChangePasswordRequest{Name: name, Password: password}, o...)
		return err
	})
}

func (c *Client) UserGrantRole(ctx context.Context, user, role string) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.UserGrantRole(ctx, &dkvpb.UserRoleRequest{User: user, Role: role}, o...)
		return err
	})
}

func (c *Client) UserRevokeRole(ctx context.Context, user, role string) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.UserRevokeRole(ctx, &dkvpb.UserRoleRequest{User: user, Role: role}, o...)
		return err
	})
}

func (c *Client) RoleAdd(ctx context.Context, name string) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.RoleAdd(ctx, &dkvpb.RoleRequest{Name: name}, o...)
		return err
	})
}

func (c *Client) RoleDelete(ctx context.Context, name string) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.RoleDelete(ctx, &dkvpb.RoleRequest{Name: name}, o...)
		return err
	})
}

func (c *Client) RoleGet(ctx context.Context, name string) (resp *dkvpb.RoleGetResponse, err error) {
	err = c.authCall(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.auth.RoleGet(ctx, &dkvpb.RoleRequest{Name: name}, o...)
		return err
	})
	return resp, err
}

func (c *Client) RoleList(ctx context.Context) (roles []string, err error) {
	err = c.authCall(ctx, false, func(ctx context.Context, o ...grpc.CallOption) error {
		resp, err := c.auth.RoleList(ctx, &dkvpb.RoleListRequest{}, o...)
		roles = resp.GetRoles()
		return err
	})
	return roles, err
}

// The permission is in the client's store (Config.Store, WithStore): its
// key range names that store's keys, and grants nothing in other stores.
func (c *Client) RoleGrantPermission(ctx context.Context, role string, perm dkvpb.Permission_Type, key, end string, prefix bool) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.RoleGrantPermission(ctx, &dkvpb.RoleGrantPermissionRequest{Role: role, Prefix: prefix,
			Permission: &dkvpb.Permission{Type: perm, Key: []byte(key), RangeEnd: []byte(end), Store: c.cfg.Store}}, o...)
		return err
	})
}

func (c *Client) RoleRevokePermission(ctx context.Context, role, key, end string, prefix bool) error {
	return c.authCall(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.auth.RoleRevokePermission(ctx, &dkvpb.RoleRevokePermissionRequest{Role: role, Key: []byte(key), RangeEnd: []byte(end), Prefix: prefix, Store: c.cfg.Store}, o...)
		return err
	})
}

// tokenSource authenticates on the first call and caches the token until
// shortly before it expires, or until the server refuses it.
type tokenSource struct {
	user, password string

	mu    sync.Mutex
	have  bool
	token string    // "" when the cluster has auth disabled
	exp   time.Time // zero: no expiry
}

// refreshMargin renews a token this long before it expires.
const refreshMargin = 10 * time.Second

func (t *tokenSource) get(ctx context.Context, cc *grpc.ClientConn) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.have && (t.exp.IsZero() || time.Until(t.exp) > refreshMargin) {
		return t.token, nil
	}
	resp, err := dkvpb.NewAuthClient(cc).Authenticate(ctx, &dkvpb.AuthenticateRequest{Name: t.user, Password: t.password})
	if err != nil {
		return "", err
	}
	t.have, t.token = true, resp.GetToken()
	t.exp = time.Time{}
	if e := resp.GetExpiresUnix(); e > 0 {
		t.exp = time.Unix(e, 0)
	}
	return t.token, nil
}

// cached is the current token, if any, without authenticating.
func (t *tokenSource) cached() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.token
}

func (t *tokenSource) drop(tok string) {
	t.mu.Lock()
	if t.token == tok {
		t.have = false
	}
	t.mu.Unlock()
}

func unauthenticated(err error) bool {
	if status.Code(err) == codes.Unauthenticated {
		return true
	}
	var de *dkverr.Error
	return errors.As(dkverr.FromGRPC(err), &de) && de.Code == dkverr.Unauthenticated
}

func withToken(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "token", tok)
}

// unary attaches the token. A call the server refused as unauthenticated
// (token expired or issued before a role change) was not applied, so it
// is retried once with a fresh token.
func (t *tokenSource) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case dkvpb.Auth_Authenticate_FullMethodName:
		return invoker(ctx, method, req, reply, cc, opts...)
	case dkvpb.Cluster_Status_FullMethodName:
		// The router's liveness probe: it must not wait for an
		// Authenticate (bcrypt takes a while), and Status needs no token.
		return invoker(withToken(ctx, t.cached()), method, req, reply, cc, opts...)
	}
	tok, err := t.get(ctx, cc)
	if err != nil {
		return err
	}
	err = invoker(withToken(ctx, tok), method, req, reply, cc, opts...)
	if err == nil || !unauthenticated(err) {
		return err
	}
	t.drop(tok)
	if tok, err = t.get(ctx, cc); err != nil {
		return err
	}
	return invoker(withToken(ctx, tok), method, req, reply, cc, opts...)
}

func (t *tokenSource) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	tok, err := t.get(ctx, cc)
	if err != nil {
		return nil, err
	}
	cs, err := streamer(withToken(ctx, tok), desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &tokenStream{ClientStream: cs, t: t, tok: tok}, nil
}

// tokenStream drops the token when the server refuses the stream, so the
// next stream (a watch reconnecting) authenticates again.
type tokenStream struct {
	grpc.ClientStream
	t   *tokenSource
	tok string
}

func (s *tokenStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && unauthenticated(err) {
		s.t.drop(s.tok)
	}
	return err
}
