package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/server/etcdapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Authorization. Every client call passes through checkCall, from the
// gRPC interceptors (which the HTTP gateway and the embedded client reach
// too) and from the few HTTP handlers that call handlers directly. With
// auth disabled checkCall costs one atomic load. With auth enabled it
// verifies the token (an HMAC, no raft round) and checks the request's
// spans against the in-memory view of the replicated auth state
// (internal/auth); the few checks that depend on stored data (the keys of
// a lease being revoked) read them from the local state. A method the
// table below does not know needs root: nothing is open by omission.

// certUser is the user named by the verified client certificate's CN
// under --client-cert-auth (as etcd does); without that flag a
// certificate names no user, so only a token authenticates.
func (s *Server) certUser(ctx context.Context) (string, bool) {
	if !s.cfg.ClientTLS.ClientCertAuth {
		return "", false
	}
	return peerCommonName(ctx)
}

// callerKey carries a *checked in a request's context: who the caller is
// and which auth view the call was checked against, for handlers that
// filter what they return and for recheck.
type callerKey struct{}

type checked struct {
	view *auth.View
	user *auth.User
}

func callerUser(ctx context.Context) *auth.User {
	if c, _ := ctx.Value(callerKey{}).(*checked); c != nil {
		return c.user
	}
	return nil
}

// memberCallKey marks a context of work the member does on its own behalf
// (cleaning up an abandoned lock wait): propose does not recheck it.
type memberCallKey struct{}

func memberCall(ctx context.Context) context.Context {
	return context.WithValue(ctx, memberCallKey{}, true)
}

// recheck checks req again if the auth view changed since checkCall saw
// it: after a linearizable wait (the view may have been behind the
// cluster) and before proposing (which stamps the view's revision into
// the command, see state.Auth.checkFresh). Unchanged, it costs one atomic
// load and a context lookup.
func (s *Server) recheck(ctx context.Context, req any) (*auth.View, error) {
	v, _, err := s.recheckCaller(ctx, req)
	return v, err
}

// recheckCaller is recheck that also returns the caller it checked (nil
// with auth disabled).
func (s *Server) recheckCaller(ctx context.Context, req any) (*auth.View, *auth.User, error) {
	v := s.sm.Auth().View()
	if !v.Enabled {
		return v, nil, nil
	}
	if c, _ := ctx.Value(callerKey{}).(*checked); c != nil && c.view == v {
		return v, c.user, nil
	}
	method, _ := grpc.Method(ctx)
	cctx, err := s.checkView(ctx, v, method, req)
	if err != nil {
		return v, nil, err
	}
	return v, callerUser(cctx), nil
}

// callerOf resolves the caller of ctx from its token (gRPC metadata
// "token" or "authorization: Bearer ...") or its client certificate.
func (s *Server) callerOf(ctx context.Context, v *auth.View) (*auth.User, error) {
	tok := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if t := md.Get("token"); len(t) > 0 {
			tok = t[0]
		} else if a := md.Get("authorization"); len(a) > 0 {
			tok = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(a[0], "Bearer "), "bearer "))
		}
	}
	if tok == "" {
		if name, ok := s.certUser(ctx); ok {
			if u, ok := v.User(name); ok {
				return u, nil
			}
			return nil, dkverr.New(dkverr.Unauthenticated, "the client certificate names user %q, who does not exist", name)
		}
		return nil, dkverr.New(dkverr.Unauthenticated, "auth is enabled and the call carries no token: authenticate (dkv --user NAME, client.Config.Username) and send it as gRPC metadata \"token\" or HTTP \"Authorization: Bearer <token>\"")
	}
	name, rev, err := s.tokens.verify(v.SigningKey, tok, time.Now())
	if err != nil {
		return nil, dkverr.New(dkverr.Unauthenticated, "%v", err)
	}
	u, ok := v.User(name)
	if !ok {
		return nil, dkverr.New(dkverr.Unauthenticated, "the token's user %q no longer exists", name)
	}
	if rev < u.Revision {
		return nil, dkverr.New(dkverr.Unauthenticated, "the token of user %q was issued at auth revision %d, before the user or its roles changed (revision %d): authenticate again", name, rev, u.Revision)
	}
	return u, nil
}

// stampAuth rechecks a client command against the auth view it is
// proposed under and stamps that view's revision into it; the state
// machine applies it only at that revision. It also stamps the caller's
// name into every command a client made, so apply can check lease
// ownership (a lease belongs to the user who granted it).
func (s *Server) stampAuth(ctx context.Context, req *dkvpb.InternalRequest) error {
	cmd, msg := state.Lookup(req)
	if ctx.Value(memberCallKey{}) != nil {
		if cmd.Checked() {
			req.AuthRevision = s.sm.Auth().View().Revision
		}
		return nil
	}
	if !cmd.Checked() {
		if u := callerUser(ctx); u != nil {
			req.User = u.Name
		}
		return nil
	}
	v, u, err := s.recheckCaller(ctx, msg)
	if err != nil {
		return err
	}
	req.AuthRevision = v.Revision
	if u != nil {
		req.User = u.Name
	}
	return nil
}

// tokenCache remembers tokens already verified, so that a client sending
// the same token with every call costs a map lookup, not a JWT parse and
// an HMAC. An entry is used only with the key it was verified with and
// until the token's expiry; the user's revision is checked on every call
// (callerOf), so a cached token is refused as soon as the user changes.
type tokenCache struct {
	mu sync.Mutex
	m  map[string]tokenInfo
}

type tokenInfo struct {
	key  string
	user string
	rev  uint64
	exp  time.Time
}

// maxCachedTokens bounds the cache; past it the cache starts over.
const maxCachedTokens = 4096

func (c *tokenCache) verify(key []byte, tok string, now time.Time) (string, uint64, error) {
	c.mu.Lock()
	ti, ok := c.m[tok]
	c.mu.Unlock()
	if ok && ti.key == string(key) && now.Before(ti.exp) {
		return ti.user, ti.rev, nil
	}
	user, rev, exp, err := auth.VerifyExp(key, tok, now)
	if err != nil {
		return "", 0, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedTokens {
		c.m = map[string]tokenInfo{}
	}
	c.m[tok] = tokenInfo{key: string(key), user: user, rev: rev, exp: exp}
	c.mu.Unlock()
	return user, rev, nil
}

// need is one permission a request needs on a span.
type need = state.Need

// rootOnly marks requests only the root role may make.
var rootOnly = state.RootOnly

// openMethods need no token even with auth enabled. Status answers a
// caller without root (or without a token) only what a client needs to
// route (filterReply).
var openMethods = map[string]bool{
	dkvpb.Auth_Authenticate_FullMethodName: true,
	dkvpb.Auth_AuthStatus_FullMethodName:   true,
	dkvpb.Cluster_Status_FullMethodName:    true,
}

// requirements lists what req needs, st being the member's applied state
// (the keys of a lease being revoked). nil: any authenticated user;
// rootOnly: the root role. A command's request needs what its row in
// package state's registry says; the reads are below. Unknown requests
// need root.
func requirements(req any, st state.LocalState) ([]need, error) {
	if m, ok := req.(proto.Message); ok {
		if c := state.CommandFor(m); c != nil {
			return c.Needs(m, st)
		}
	}
	switch r := req.(type) {
	case *dkvpb.RangeRequest:
		return state.RangeNeeds(r), nil
	case *dkvpb.LockDescribeRequest:
		return []need{{Perm: auth.Read, Span: auth.Key(r.GetKey()), What: "lock describe"}}, nil
	case *dkvpb.LeaseKeepAliveOnceRequest, *dkvpb.LeaseLeasesRequest,
		*dkvpb.LeaseKeepAliveRequest, *dkvpb.StatusRequest:
		// Lease ids and TTLs reveal no key; Status's details are kept
		// for root (filterReply).
		return nil, nil
	case *dkvpb.LeaseTimeToLiveRequest:
		if !r.GetKeys() {
			return nil, nil
		}
		return state.LeaseKeyNeeds(st, r.GetId(), auth.Read, "lease time-to-live with keys")
	case *dkvpb.QueryRequest:
		// A query reads (part of) the keys under its prefix. Its handler
		// checks read on that prefix once mapped into the call's store
		// (grpcapi/query.go); here, any authenticated user.
		return nil, nil
	}
	return rootOnly, nil
}

// checkCall authorizes req for method: nil when auth is disabled (one
// atomic load) or the caller may make it. It returns the context with the
// caller attached, for filterReply.
func (s *Server) checkCall(ctx context.Context, method string, req any) (context.Context, error) {
	v := s.sm.Auth().View()
	if !v.Enabled {
		return ctx, nil
	}
	return s.checkView(ctx, v, method, req)
}

func (s *Server) checkView(ctx context.Context, v *auth.View, method string, req any) (context.Context, error) {
	if u, ok := s.memberCaller(ctx, method); ok {
		// Another member's divergence check (memberproof.go).
		return context.WithValue(ctx, callerKey{}, &checked{view: v, user: u}), nil
	}
	if openMethods[method] {
		u, _ := s.callerOf(ctx, v) // none: still open, and filtered
		return context.WithValue(ctx, callerKey{}, &checked{view: v, user: u}), nil
	}
	u, err := s.callerOf(ctx, v)
	if err != nil {
		s.denied("", method, "", err)
		return ctx, err
	}
	needs, err := requirements(req, s.sm.LocalState())
	if err != nil {
		return ctx, err
	}
	for _, n := range needs {
		if err := allowed(u, n); err != nil {
			s.denied(u.Name, method, n.Span.String(), err)
			return ctx, err
		}
	}
	return context.WithValue(ctx, callerKey{}, &checked{view: v, user: u}), nil
}

func allowed(u *auth.User, n need) error {
	if n.What == "root" {
		if u.Root {
			return nil
		}
		return dkverr.New(dkverr.PermissionDenied, "user %q lacks the role %q this call needs", u.Name, auth.RootRole)
	}
	if u.Allowed(n.Perm, n.Span) {
		return nil
	}
	return dkverr.New(dkverr.PermissionDenied, "user %q lacks %s permission on %s (needed by %s)", u.Name, n.Perm, n.Span, n.What)
}

// denied records a refused call: a structured log line and a counter.
func (s *Server) denied(user, method, span string, err error) {
	reason := "permission_denied"
	switch dkverr.CodeOf(err) {
	case dkverr.Unauthenticated:
		reason = "unauthenticated"
	case dkverr.Throttled:
		reason = "throttled"
	}
	if s.metrics != nil {
		s.metrics.authDenied.WithLabelValues(reason).Inc()
	}
	// One line per reason and method every 10 s: a flood of refusals
	// (password guessing) must not flood the log; the counter above
	// counts them all.
	suppressed := 0
	if s.deniedLog != nil {
		n, ok := s.deniedLog.Allow(reason + " " + method)
		if !ok {
			return
		}
		suppressed = n
	}
	s.log.Warn("auth: call refused", "user", user, "method", method, "key_range", span, "reason", reason, "detail", dkverr.Message(err), "suppressed_since_last", suppressed)
}

// filterReply removes from resp what the caller may not see: a member's
// status details unless root, and (belt and braces, should a key be
// attached between the check and the read) a lease key it may not read.
func filterReply(ctx context.Context, resp any) {
	c, _ := ctx.Value(callerKey{}).(*checked)
	if c == nil || c.user != nil && c.user.Root {
		return // auth disabled, or root
	}
	u := c.user
	switch r := resp.(type) {
	case *dkvpb.LeaseTimeToLiveResponse:
		if u == nil {
			r.Keys = nil
			return
		}
		keep := r.Keys[:0]
		for _, k := range r.Keys {
			if u.Allowed(auth.Read, auth.Key(k)) {
				keep = append(keep, k)
			}
		}
		r.Keys = keep
	case *dkvpb.StatusResponse:
		*r = dkvpb.StatusResponse{Header: r.Header, MemberId: r.MemberId, LeaderId: r.LeaderId, IsLearner: r.IsLearner, Version: r.Version}
	}
}

func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if etcdapi.IsEtcdMethod(info.FullMethod) {
		return handler(ctx, req) // checked per DKV call it makes (authUnary)
	}
	return s.authUnary(ctx, req, info.FullMethod, handler)
}

// authUnary checks req as a call of method, runs handler and filters its
// reply.
//
// Before both, req's keys are mapped into the call's store (stores.go),
// so auth checks the keys the call really reaches; the reply's keys are
// mapped back last.
func (s *Server) authUnary(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (any, error) {
	store, err := s.storeRequest(ctx, method, req)
	if err != nil {
		return nil, err
	}
	ctx, err = s.checkCall(ctx, method, req)
	if err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	if err == nil {
		filterReply(ctx, resp)
		store.Response(resp)
	}
	return resp, err
}

// streamAuth checks a stream when it opens. A watch's ranges are checked
// per create request (grpcapi's watchService.create); a snapshot download
// needs root; lease keep-alives any authenticated user.
func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if etcdapi.IsEtcdMethod(info.FullMethod) {
		return handler(srv, ss) // checked as the DKV stream it opens (authStream)
	}
	return s.authStream(srv, ss, info.FullMethod, handler)
}

// authStream checks opening a stream of method and runs handler.
func (s *Server) authStream(srv any, ss grpc.ServerStream, method string, handler grpc.StreamHandler) error {
	var req any
	switch method {
	case dkvpb.Watch_Watch_FullMethodName, dkvpb.Lease_KeepAlive_FullMethodName:
		req = &dkvpb.LeaseKeepAliveRequest{} // authenticated, no more
	}
	ctx, err := s.checkCall(ss.Context(), method, req)
	if err != nil {
		return err
	}
	if method == dkvpb.Lease_KeepAlive_FullMethodName && ctx != ss.Context() {
		// The handler learns who the caller is: a keep-alive renews only
		// the caller's own leases.
		ss = callerStream{ServerStream: ss, ctx: ctx}
	}
	return handler(srv, ss)
}

// callerStream is a stream whose context carries its checked caller.
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c callerStream) Context() context.Context { return c.ctx }

// forwardCredentials passes the caller's token on when a member forwards
// its call to the leader (member changes, leader transfer), so the leader
// checks the same caller.
func forwardCredentials(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, k := range []string{"token", "authorization"} {
			if v := md.Get(k); len(v) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, k, v[0])
			}
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// httpAuthContext carries an HTTP request's Authorization header into the
// context as incoming gRPC metadata, for the handlers /v1/keys/ calls
// directly (the gateway forwards it itself).
func httpAuthContext(r *http.Request) context.Context {
	if a := r.Header.Get("Authorization"); a != "" {
		return metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", a))
	}
	return r.Context()
}

// requireRootHTTP guards an HTTP handler (pprof) with the root role when
// auth is enabled.
func (s *Server) requireRootHTTP(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.checkCall(httpAuthContext(r), "HTTP "+r.URL.Path, nil); err != nil {
			httpError(w, err)
			return
		}
		h(w, r)
	}
}

// changeAuth replicates an auth change made through the Auth service
// (what names the call) and logs it for audit, without password hashes.
// Changes are hashed on the receiving member and proposed with the hash;
// apply never hashes.
func (s *Server) changeAuth(ctx context.Context, what string, ch *dkvpb.AuthChange) (*dkvpb.AuthResponse, error) {
	res, err := s.proposeRequest(ctx, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Auth{Auth: ch}})
	if err != nil {
		return nil, err
	}
	by := ""
	if u := callerUser(ctx); u != nil {
		by = u.Name
	}
	if res.Err != nil {
		s.log.Info("auth: change refused", "user", by, "method", what, "reason", dkverr.Message(res.Err))
		return nil, res.Err
	}
	resp, ok := res.Resp.(*dkvpb.AuthResponse)
	if !ok {
		return nil, dkverr.New(dkverr.Internal, "unexpected response %T", res.Resp)
	}
	s.log.Info("auth: changed", "user", by, "method", what, "change", changeSummary(ch), "auth_revision", resp.GetAuthRevision())
	s.completeHeader(resp.Header)
	return resp, nil
}

// changeSummary describes ch for the audit log, without password hashes.
func changeSummary(ch *dkvpb.AuthChange) string {
	c := proto.Clone(ch).(*dkvpb.AuthChange)
	switch x := c.GetChange().(type) {
	case *dkvpb.AuthChange_Enable:
		return "auth enable"
	case *dkvpb.AuthChange_UserAdd:
		x.UserAdd.PasswordHash = nil
	case *dkvpb.AuthChange_UserPassword:
		x.UserPassword.PasswordHash = nil
	}
	return strings.TrimSpace(c.String())
}

// login checks name's password against v. Failed logins are throttled
// per user and source address, and per address; the check is bounded
// and costs the same for an unknown user (logins.go).
func (s *Server) login(ctx context.Context, v *auth.View, name, password string) (*auth.User, error) {
	g, from := s.logins, loginSource(ctx)
	if err := g.begin(name, from); err != nil {
		s.denied(name, dkvpb.Auth_Authenticate_FullMethodName, "", err)
		return nil, err
	}
	u, ok := v.User(name)
	var hash []byte
	if ok && !u.NoPassword {
		hash = u.PasswordHash
	}
	match, err := g.check(ctx, hash, password)
	if err != nil {
		g.abandon(name, from) // not a guess: the caller gave up waiting
		return nil, err
	}
	g.end(name, from, match)
	if !match {
		err := dkverr.New(dkverr.Unauthenticated, "wrong user name or password for %q", name)
		s.denied(name, dkvpb.Auth_Authenticate_FullMethodName, "", err)
		return nil, err
	}
	return u, nil
}
