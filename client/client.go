package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/attributes"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Config configures a remote Client.
type Config struct {
	// Endpoints are the gRPC addresses of cluster members: "host:port",
	// or "http://host:port" as etcd tools write them. (TLS is set by
	// the TLS field, not by an https:// scheme, which is refused.) Reads
	// are balanced round-robin
	// across those that are up and answering; writes go to the leader
	// when the client knows it.
	Endpoints []string
	// DialTimeout bounds how long New waits for the first connection
	// (default 5s); its error names each endpoint's last failure
	// ("connection refused", a DNS error). A negative value makes New
	// return at once and connect in the background.
	DialTimeout time.Duration
	// FailFast makes New give up as soon as every endpoint has failed to
	// connect and then none connected within half a second more (gRPC
	// retries after ~100ms, so one connection dropped on a loaded machine
	// is not fatal), rather
	// than wait DialTimeout for one to come up: what a command-line tool
	// wants, unlike a service started along with its cluster.
	FailFast bool
	// MaxRetries is how many times a retryable failure (see the package
	// doc) is retried, with backoff, within the call's ctx (default 8).
	MaxRetries int
	// RetryBackoff is the first retry's delay; it doubles up to 1s
	// (default 25ms).
	RetryBackoff time.Duration
	// TLS, when set, connects over TLS with this configuration: RootCAs
	// for the cluster's CA, Certificates (or GetClientCertificate) for a
	// client certificate when the cluster wants one. Nil is plaintext.
	// Every endpoint, discovered ones included, is dialled with it; the
	// server name checked is each endpoint's host unless ServerName is
	// set.
	TLS *tls.Config
	// DialOptions are extra gRPC options, appended after the client's own.
	DialOptions []grpc.DialOption
	// AutoSyncInterval is how often the client asks the cluster for its
	// members and adds their client URLs to the endpoints it uses, so that
	// naming one member is enough to reach them all (default 30s). The
	// first sync runs in the background as New returns; New never waits
	// for it. Negative disables discovery: the client then talks only to
	// Endpoints, which is what a tool asking one particular member needs.
	AutoSyncInterval time.Duration
	// UnresponsiveTimeout is how long an endpoint with requests in flight
	// may answer nothing before the client treats it as hung (a paused
	// or stuck member keeps its connections open): the client then sends
	// new requests to the other endpoints, gives up the requests in
	// flight on it (reads are retried elsewhere; a write that was sent
	// reports ErrUnknownOutcome and is not retried) and probes it until
	// it answers again. Default 1s; negative disables the check.
	UnresponsiveTimeout time.Duration
	// Username and Password authenticate the client when the cluster has
	// auth enabled: the client asks for a token on its first call, sends
	// it with every call, and asks again when it expires or the server
	// refuses it (after a role or password change). Empty: no token.
	Username string
	Password string
	// Store is the named store every call of the client is in (see
	// docs/data-model.md); empty is the default store. The store must
	// have been created (dkv store create NAME, or the Store service).
	Store string
	// SessionTTL is how long the client's session (exactly-once writes,
	// docs/client.md) lives unused; a write whose outcome is unknown is
	// sent again, and applies once, as long as the client reaches the
	// cluster within it. Default DefaultSessionTTL (2m); 1s to 1h; negative
	// turns sessions off, so a write that may or may not have applied
	// returns ErrUnknownOutcome as etcd's client does.
	SessionTTL time.Duration
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 8
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 25 * time.Millisecond
	}
	if c.AutoSyncInterval == 0 {
		c.AutoSyncInterval = 30 * time.Second
	}
	if c.UnresponsiveTimeout == 0 {
		c.UnresponsiveTimeout = time.Second
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return newError(ErrInvalidInput, "no endpoints")
	}
	for _, e := range c.Endpoints {
		if _, err := ParseEndpoint(e); err != nil {
			return err
		}
	}
	if c.MaxRetries < 0 {
		return newError(ErrInvalidInput, "max retries %d is negative", c.MaxRetries)
	}
	if c.SessionTTL > 0 && (c.SessionTTL < time.Second || c.SessionTTL > time.Hour) {
		return newError(ErrInvalidInput, "session TTL %v: it must be 1s to 1h (or negative to turn sessions off)", c.SessionTTL)
	}
	if c.UnresponsiveTimeout > 0 && c.UnresponsiveTimeout < 10*time.Millisecond {
		return newError(ErrInvalidInput, "unresponsive timeout %v: it must be at least 10ms (or negative to disable)", c.UnresponsiveTimeout)
	}
	return nil
}

// transportCreds is TLS with cfg, or plaintext without.
func transportCreds(cfg *tls.Config) grpc.DialOption {
	if cfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// ParseEndpoint checks one endpoint and returns it as "host:port": an
// "http://" prefix and a trailing "/" are dropped; "https://" is refused
// (Config.TLS turns TLS on), as is an address without a port.
func ParseEndpoint(s string) (string, error) {
	e := strings.TrimSpace(s)
	if e == "" {
		return "", newError(ErrInvalidInput, "empty endpoint")
	}
	if scheme, rest, ok := strings.Cut(e, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http":
			e = strings.TrimSuffix(rest, "/")
		case "https":
			return "", newError(ErrInvalidInput, "endpoint %q: write it as host:port; TLS is turned on by Config.TLS (dkv: --cacert), not by https://", s)
		default:
			return "", newError(ErrInvalidInput, "endpoint %q: unknown scheme %q; use host:port or http://host:port", s, scheme)
		}
	}
	host, port, err := net.SplitHostPort(e)
	if err != nil {
		msg := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			msg = ae.Err
		}
		return "", newError(ErrInvalidInput, "endpoint %q: %s; want host:port, e.g. 127.0.0.1:7861", s, msg)
	}
	if host == "" {
		return "", newError(ErrInvalidInput, "endpoint %q: no host; want host:port, e.g. 127.0.0.1:7861", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", newError(ErrInvalidInput, "endpoint %q: port %q is not a number from 1 to 65535", s, port)
	}
	return e, nil
}

// Client is a connection to a DKV store, remote (New) or embedded
// (package server/embed). It is safe for concurrent use.
type Client struct {
	cfg     Config
	conn    *grpc.ClientConn
	cc      grpc.ClientConnInterface // conn, in cfg.Store (store.go)
	kv      dkvpb.KVClient
	cluster dkvpb.ClusterClient
	maint   dkvpb.MaintenanceClient
	rl      dkvpb.RateLimitClient
	qu      dkvpb.QueueClient
	query   dkvpb.QueryClient
	auth    dkvpb.AuthClient

	onClose    func() error // NewFromConn's hook, e.g. stopping an embedded node
	borrowed   bool         // WithStore's: the connection is its parent's
	watches    *watchMux
	resolver   *manual.Resolver
	router     *router
	stopSync   chan struct{}
	epMu       sync.Mutex
	discovered []string
	syncDone   chan struct{}
	closeOnce  sync.Once
	closeErr   error
	sess       session // exactly-once writes (session.go)
}

var schemeSeq atomic.Uint64

// New connects to a remote DKV cluster.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	eps := make([]string, len(cfg.Endpoints))
	for i, e := range cfg.Endpoints {
		eps[i], _ = ParseEndpoint(e)
	}
	cfg.Endpoints = eps
	// A private resolver per client hands gRPC every endpoint, and the
	// client's router to its balancer (balancer.go).
	var c *Client
	rt := newRouter(cfg.UnresponsiveTimeout, func(ctx context.Context, _ string) (*dkvpb.StatusResponse, error) {
		return c.cluster.Status(ctx, &dkvpb.StatusRequest{})
	})
	r := manual.NewBuilderWithScheme(fmt.Sprintf("dkv%d", schemeSeq.Add(1)))
	r.InitialState(resolverState(rt, eps))
	opts := []grpc.DialOption{
		grpc.WithResolvers(r),
		transportCreds(cfg.TLS),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"` + balancerName + `":{}}]}`),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		// Reconnect to a member that comes back within seconds, not the
		// minutes gRPC's default backoff can reach.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: grpcbackoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second,
		}}),
	}
	if cfg.Username != "" {
		ts := &tokenSource{user: cfg.Username, password: cfg.Password}
		opts = append(opts, grpc.WithChainUnaryInterceptor(ts.unary), grpc.WithChainStreamInterceptor(ts.stream))
	}
	opts = append(opts, cfg.DialOptions...)
	conn, err := grpc.NewClient(r.Scheme()+":///dkv", opts...)
	if err != nil {
		return nil, fmt.Errorf("dkv client: %w", err)
	}
	if cfg.DialTimeout > 0 {
		if err := waitConnected(ctx, conn, rt, cfg.DialTimeout, cfg.FailFast); err != nil {
			conn.Close()
			if wantsClientCert(ctx, cfg.TLS, eps) {
				return nil, newError(ErrUnavailable, "%s (Config.TLS has no certificate)", errCertRequired)
			}
			return nil, err
		}
	}
	c = newClient(cfg, conn)
	c.resolver = r
	c.router = rt
	rt.start()
	if cfg.AutoSyncInterval > 0 {
		c.startAutoSync()
	}
	return c, nil
}

func resolverState(rt *router, eps []string) resolver.State {
	addrs := make([]resolver.Address, len(eps))
	for i, e := range eps {
		// ServerName: with TLS the member's certificate is checked
		// against the endpoint's host, not the channel's name.
		host, _, err := net.SplitHostPort(e)
		if err != nil {
			host = e
		}
		addrs[i] = resolver.Address{Addr: e, ServerName: host}
	}
	return resolver.State{Addresses: addrs, Attributes: attributes.New(routerKey{}, rt)}
}

func newClient(cfg Config, conn *grpc.ClientConn) *Client {
	var cc grpc.ClientConnInterface = conn
	if cfg.Store != "" {
		cc = storeConn{conn, cfg.Store}
	}
	c := &Client{
		cfg:     cfg,
		conn:    conn,
		cc:      cc,
		kv:      dkvpb.NewKVClient(cc),
		cluster: dkvpb.NewClusterClient(cc),
		maint:   dkvpb.NewMaintenanceClient(cc),
		rl:      dkvpb.NewRateLimitClient(cc),
		qu:      dkvpb.NewQueueClient(cc),
		query:   dkvpb.NewQueryClient(cc),
		auth:    dkvpb.NewAuthClient(cc),
	}
	c.watches = &watchMux{c: c}
	return c
}

// failFastRetry is how long FailFast waits, after every endpoint failed
// once, for one to connect on gRPC's next attempt.
const failFastRetry = 500 * time.Millisecond

// waitConnected waits until some endpoint is connected; with failFast it
// gives up, with every endpoint's error, once all of them failed to
// connect.
func waitConnected(ctx context.Context, conn *grpc.ClientConn, rt *router, timeout time.Duration, failFast bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	retried := false
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			if !failFast {
				break
			}
			if retried {
				return newError(ErrUnavailable, "no endpoint reachable: %s", rt.failures())
			}
			// One more chance: gRPC reconnects after its first backoff
			// (100ms); the channel stays in TransientFailure until an
			// endpoint is ready, so wait for Ready for a moment.
			retried = true
			rctx, rcancel := context.WithTimeout(ctx, failFastRetry)
			for conn.WaitForStateChange(rctx, conn.GetState()) && conn.GetState() != connectivity.Ready {
			}
			rcancel()
			continue
		}
		if !conn.WaitForStateChange(ctx, s) {
			if ctx.Err() == context.DeadlineExceeded {
				return newError(ErrUnavailable, "no endpoint connected within %v: %s", timeout, rt.connSummary())
			}
			return newError(ErrUnavailable, "no endpoint connected: %v (%s)", ctx.Err(), rt.connSummary())
		}
	}
}

// NewFromConn returns a Client that sends every request over conn, a
// connection the caller dialled to one DKV member (an in-process pipe, a
// custom transport). It uses Config's default retry settings, does no
// endpoint discovery and no routing around hung members: there is only
// conn. Close closes conn, then calls onClose (if not nil) and returns its
// error; package server/embed uses it to stop its node.
func NewFromConn(conn *grpc.ClientConn, onClose func() error) *Client {
	var cfg Config
	cfg.EnsureDefaults()
	c := newClient(cfg, conn)
	c.onClose = onClose
	return c
}

// Close releases the connection and, for NewFromConn, runs its onClose
// hook (an embedded client stops its node).
func (c *Client) Close() error {
	if c.borrowed {
		return nil
	}
	c.closeOnce.Do(func() {
		if c.stopSync != nil {
			close(c.stopSync)
			<-c.syncDone
		}
		if c.router != nil {
			c.router.stop()
		}
		c.closeErr = c.conn.Close()
		if c.onClose != nil {
			if err := c.onClose(); err != nil && c.closeErr == nil {
				c.closeErr = err
			}
		}
	})
	return c.closeErr
}

// Conn is the underlying gRPC connection, for the services this package
// does not wrap. Do not close it; call Close.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Status reports the status of the member that served the request.
func (c *Client) Status(ctx context.Context) (*dkvpb.StatusResponse, error) {
	var resp *dkvpb.StatusResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.Status(ctx, &dkvpb.StatusRequest{}, o...)
		return err
	})
	return resp, err
}

// MemberList lists the cluster's members, as seen linearizably, or with
// WithSerializable as the contacted member knows them (no quorum needed;
// possibly stale).
func (c *Client) MemberList(ctx context.Context, opts ...OpOption) (*dkvpb.MemberListResponse, error) {
	cfg := buildConfig(opts)
	if err := cfg.readOnlyErr("member list"); err != nil {
		return nil, err
	}
	if cfg.prefix || cfg.hasRange || cfg.limit != 0 || cfg.rev != 0 || cfg.keysOnly || cfg.countOnly || cfg.lock != nil {
		return nil, newError(ErrInvalidInput, "member list takes only WithSerializable")
	}
	var resp *dkvpb.MemberListResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.MemberList(ctx, &dkvpb.MemberListRequest{Linearizable: !cfg.serializable}, o...)
		return err
	})
	return resp, err
}

// call runs one RPC with the client's retry policy: a read is retried on
// any unavailability; a write only when it certainly did not apply (the
// server refused it with Unavailable, or it never left this process).
func (c *Client) call(ctx context.Context, write bool, rpc func(context.Context, ...grpc.CallOption) error) error {
	return c.invoke(ctx, write, false, rpc)
}

// callWait is call for a request that may legitimately wait long (a
// lock acquire that queues): the router does not take its silence for a
// hung endpoint.
func (c *Client) callWait(ctx context.Context, write bool, rpc func(context.Context, ...grpc.CallOption) error) error {
	return c.invoke(ctx, write, true, rpc)
}

func (c *Client) invoke(ctx context.Context, write, long bool, rpc func(context.Context, ...grpc.CallOption) error) error {
	return c.invokeRouted(ctx, write, long, write, rpc)
}

// callOnLeader is call for a request retried like a read (repeating it is
// harmless) that is still a raft proposal, such as a lease renewal: it
// goes to the leader when the client knows it, as a write does.
func (c *Client) callOnLeader(ctx context.Context, rpc func(context.Context, ...grpc.CallOption) error) error {
	return c.invokeRouted(ctx, false, false, true, rpc)
}

// invokeRouted runs rpc with write's retry policy, routed to the leader
// when toLeader and the leader is known.
func (c *Client) invokeRouted(ctx context.Context, write, long, toLeader bool, rpc func(context.Context, ...grpc.CallOption) error) error {
	kind := opRead
	if write {
		kind = opWrite
	}
	return c.invokeAttempts(ctx, kind, long, toLeader, nil, rpc)
}

// invokeAttempts runs rpc until it succeeds or kind's policy gives up;
// decorate, if set, prepares each attempt's ctx (an exactly-once write's
// session).
func (c *Client) invokeAttempts(ctx context.Context, kind opKind, long, toLeader bool, decorate func(context.Context) context.Context, rpc func(context.Context, ...grpc.CallOption) error) error {
	write := kind != opRead
	mayHaveApplied := false
	b := newBackoff(c.cfg.RetryBackoff)
	for n := 0; ; n++ {
		var p peer.Peer
		actx, cancel := context.WithCancelCause(ctx)
		a := &attempt{write: toLeader, long: long, start: time.Now(), cancel: cancel}
		rctx := withAttempt(actx, a)
		if decorate != nil {
			rctx = decorate(rctx)
		}
		err := rpc(rctx, grpc.Peer(&p))
		cancel(nil)
		if err == nil {
			return nil
		}
		var f failure
		var hung *unresponsiveError
		if ctx.Err() == nil && errors.As(context.Cause(actx), &hung) {
			// Given up because its endpoint stopped answering.
			if write {
				f = failure{err: fmt.Errorf("%w: %w", ErrUnknownOutcome, hung), class: classUnknown}
			} else {
				f = failure{err: &Error{Kind: ErrUnavailable, Msg: hung.Error()}, class: classUnavailable}
			}
		} else {
			f = classify(ctx, err, p.Addr != nil, write)
		}
		if kind == opOnce && errors.Is(f.err, ErrSessionExpired) {
			if mayHaveApplied {
				// An earlier attempt, in the session now gone, may have
				// applied: nobody can tell any more.
				return fmt.Errorf("%w: %w", ErrUnknownOutcome, f.err)
			}
			return fmt.Errorf("%w: %w", errReopen, f.err)
		}
		if f.class == classUnknown {
			mayHaveApplied = true
		}
		// An exactly-once write whose outcome is unknown is sent again
		// until ctx ends, however many attempts that takes.
		if !kind.retries(f.class) || (n >= c.cfg.MaxRetries && !(kind == opOnce && mayHaveApplied)) {
			return f.err
		}
		if !b.wait(ctx, 0, nil) {
			// The last attempt's error says more than ctx's.
			if kind == opOnce && mayHaveApplied && !errors.Is(f.err, ErrUnknownOutcome) {
				return fmt.Errorf("%w: %w", ErrUnknownOutcome, f.err)
			}
			return f.err
		}
	}
}
