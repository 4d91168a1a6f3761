package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Config configures a remote Client.
type Config struct {
	// Endpoints are the gRPC addresses ("host:port") of cluster members.
	// Requests are balanced round-robin across those that are up.
	Endpoints []string
	// DialTimeout bounds how long New waits for the first connection
	// (default 5s). A negative value makes New return at once and connect
	// in the background.
	DialTimeout time.Duration
	// MaxRetries is how many times a retryable failure (see the package
	// doc) is retried, with backoff, within the call's ctx (default 8).
	MaxRetries int
	// RetryBackoff is the first retry's delay; it doubles up to 1s
	// (default 25ms).
	RetryBackoff time.Duration
	// DialOptions are extra gRPC options, appended after the client's own.
	DialOptions []grpc.DialOption
	// AutoSyncInterval is how often the client asks the cluster for its
	// members and adds their client URLs to the endpoints it balances
	// over, so that naming one member is enough to reach them all
	// (default 30s; negative disables discovery).
	AutoSyncInterval time.Duration
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
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return newError(ErrInvalidInput, "no endpoints")
	}
	for _, e := range c.Endpoints {
		if strings.TrimSpace(e) == "" {
			return newError(ErrInvalidInput, "empty endpoint in %q", c.Endpoints)
		}
	}
	if c.MaxRetries < 0 {
		return newError(ErrInvalidInput, "max retries %d is negative", c.MaxRetries)
	}
	return nil
}

// Client is a connection to a DKV store, remote (New) or embedded
// (OpenEmbedded). It is safe for concurrent use.
type Client struct {
	cfg     Config
	conn    *grpc.ClientConn
	kv      dkvpb.KVClient
	cluster dkvpb.ClusterClient
	maint   dkvpb.MaintenanceClient

	srv        *server.Server // embedded mode only
	resolver   *manual.Resolver
	stopSync   chan struct{}
	epMu       sync.Mutex
	discovered []string
	syncDone   chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

var _ KV = (*Client)(nil)

var schemeSeq atomic.Uint64

// New connects to a remote DKV cluster.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// A private resolver per client hands gRPC every endpoint; the
	// round_robin policy skips endpoints whose connection is down.
	r := manual.NewBuilderWithScheme(fmt.Sprintf("dkv%d", schemeSeq.Add(1)))
	addrs := make([]resolver.Address, len(cfg.Endpoints))
	for i, e := range cfg.Endpoints {
		addrs[i] = resolver.Address{Addr: strings.TrimSpace(e)}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	opts := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}
	opts = append(opts, cfg.DialOptions...)
	conn, err := grpc.NewClient(r.Scheme()+":///dkv", opts...)
	if err != nil {
		return nil, fmt.Errorf("dkv client: %w", err)
	}
	if cfg.DialTimeout > 0 {
		if err := waitConnected(ctx, conn, cfg.DialTimeout); err != nil {
			conn.Close()
			return nil, newError(ErrUnavailable, "no endpoint of %s reachable within %v: %v", strings.Join(cfg.Endpoints, ","), cfg.DialTimeout, err)
		}
	}
	c := newClient(cfg, conn)
	c.resolver = r
	if cfg.AutoSyncInterval > 0 {
		c.startAutoSync()
	}
	return c, nil
}

func newClient(cfg Config, conn *grpc.ClientConn) *Client {
	return &Client{
		cfg:     cfg,
		conn:    conn,
		kv:      dkvpb.NewKVClient(conn),
		cluster: dkvpb.NewClusterClient(conn),
		maint:   dkvpb.NewMaintenanceClient(conn),
	}
}

func waitConnected(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}

// Close releases the connection and, in embedded mode, stops the node.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.stopSync != nil {
			close(c.stopSync)
			<-c.syncDone
		}
		c.closeErr = c.conn.Close()
		if c.srv != nil {
			if err := c.srv.Stop(); err != nil && c.closeErr == nil {
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

// MemberList lists the cluster's members, as seen linearizably.
func (c *Client) MemberList(ctx context.Context) (*dkvpb.MemberListResponse, error) {
	var resp *dkvpb.MemberListResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.MemberList(ctx, &dkvpb.MemberListRequest{Linearizable: true}, o...)
		return err
	})
	return resp, err
}

// call runs one RPC with the client's retry policy: a read is retried on
// any unavailability; a write only when it certainly did not apply (the
// server refused it with Unavailable, or it never left this process).
func (c *Client) call(ctx context.Context, write bool, rpc func(context.Context, ...grpc.CallOption) error) error {
	backoff := c.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		var p peer.Peer
		err := rpc(ctx, grpc.Peer(&p))
		if err == nil {
			return nil
		}
		f := classify(ctx, err, p.Addr != nil, write)
		retry := f.retryable || (!write && f.readRetryable)
		if !retry || attempt >= c.cfg.MaxRetries {
			return f.err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			// The last attempt's error says more than ctx's.
			return f.err
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}
