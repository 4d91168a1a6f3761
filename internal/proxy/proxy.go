package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/httpguard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Config configures a proxy.
type Config struct {
	// Endpoints are the cluster members' client gRPC addresses,
	// host:port. Calls and upstream watches are spread over those that
	// are up; a watch whose member fails resumes on another.
	Endpoints []string
	// UpstreamTLS, when set, is how the proxy connects to the members
	// (RootCAs; Certificates for a cluster that wants a client
	// certificate). Nil is plaintext.
	UpstreamTLS *tls.Config
	// ListenAddr is the gRPC address local clients connect to.
	ListenAddr string
	// AdvertiseAddr is the address member lists name as every member's
	// client address, so DKV clients that discover endpoints keep using
	// the proxy (default: the bound ListenAddr).
	AdvertiseAddr string
	// HTTPAddr, when set, serves /metrics, /livez and /readyz.
	HTTPAddr string
	// HTTPAllowedHosts are the host names, besides the proxy's own
	// addresses (listen, advertised and HTTP), localhost and loopback
	// IPs, that the HTTP port answers to ("host" or "host:port"; the
	// port is ignored); "*" allows any. Another Host header gets 421
	// on every path but /livez and /readyz, so a page whose DNS name an
	// attacker rebinds to the proxy reads nothing (internal/httpguard,
	// as on a member's HTTP port).
	HTTPAllowedHosts []string
	// ServerTLS, when set, serves both addresses over TLS.
	ServerTLS *tls.Config
	// MaxLocalQueue is how many responses a local watch stream may have
	// waiting to be sent before the proxy ends it with Unavailable (its
	// client resumes from its revision). Default 4096.
	MaxLocalQueue int
	// ReadCacheBytes bounds the cache of serializable reads (cache.go):
	// keys, responses and bookkeeping together. 0 is the default, 64
	// MiB; negative turns the cache off.
	ReadCacheBytes int64
	// NoKeepAliveSharing relays every local lease KeepAlive stream as it
	// is, instead of sharing one upstream stream per identity
	// (keepalive.go).
	NoKeepAliveSharing bool
	// Logger; nil discards.
	Logger *slog.Logger
}

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.MaxLocalQueue == 0 {
		c.MaxLocalQueue = 4096
	}
	if c.ReadCacheBytes == 0 {
		c.ReadCacheBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if len(c.Endpoints) == 0 {
		return errors.New("proxy: no upstream endpoints")
	}
	for _, e := range c.Endpoints {
		if _, _, err := net.SplitHostPort(e); err != nil {
			return fmt.Errorf("proxy: endpoint %q: %v", e, err)
		}
	}
	if c.ListenAddr == "" {
		return errors.New("proxy: no listen address")
	}
	for _, h := range c.HTTPAllowedHosts {
		if err := httpguard.CheckAllowedHost(h); err != nil {
			return fmt.Errorf("proxy: %v", err)
		}
	}
	if c.MaxLocalQueue < 1 {
		return fmt.Errorf("proxy: max local queue %d must be positive", c.MaxLocalQueue)
	}
	return nil
}

// Proxy is a running proxy.
type Proxy struct {
	cfg     Config
	log     *slog.Logger
	conn    *grpc.ClientConn
	srv     *grpc.Server
	lis     net.Listener
	httpLis net.Listener
	httpSrv *http.Server
	metrics *metrics
	watches *watchHub
	cache   *readCache // nil when off
	// keepAlives shares DKV lease KeepAlive streams.
	keepAlives *kaHub
	// advertise is what member lists say each member's client URL is.
	advertise string

	ctx    context.Context // ends with Close: every upstream watch
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type metrics struct {
	reg       *prometheus.Registry
	forwarded prometheus.Counter
	resumes   prometheus.Counter
	merges    prometheus.Counter

	cacheHits, cacheMisses prometheus.Counter
}

func newMetrics(h *watchHub, c *readCache, ka *kaHub) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dkv_proxy_forwarded_calls_total", Help: "Calls forwarded to the cluster as they are."}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dkv_proxy_upstream_watch_resumes_total", Help: "Upstream watches resumed after their stream failed."}),
		merges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dkv_proxy_upstream_watch_merges_total", Help: "Upstream watches that caught up and handed their local watches to a shared one."}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dkv_proxy_read_cache_hits_total", Help: "Serializable reads answered from the proxy's cache."}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dkv_proxy_read_cache_misses_total", Help: "Serializable reads of the current revision that went to the cluster."}),
	}
	m.reg.MustRegister(m.forwarded, m.resumes, m.merges, m.cacheHits, m.cacheMisses,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dkv_proxy_read_cache_bytes", Help: "Bytes the read cache holds (keys, responses and bookkeeping)."},
			func() float64 {
				if c == nil {
					return 0
				}
				return float64(c.size())
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dkv_proxy_read_cache_range_watches", Help: "Watches of single cached ranges, for identities that may not watch the whole keyspace."},
			func() float64 {
				if c == nil {
					return 0
				}
				return float64(c.rangeWatchCount())
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dkv_proxy_local_keepalive_streams", Help: "Lease KeepAlive streams local clients hold on the proxy (shared ones)."},
			func() float64 { return float64(ka.local.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dkv_proxy_upstream_keepalive_streams", Help: "Lease KeepAlive streams the proxy holds on the cluster for its local ones."},
			func() float64 { return float64(ka.upstream.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dkv_proxy_local_watchers", Help: "Watches local clients hold on the proxy."},
			func() float64 { return float64(h.local.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dkv_proxy_upstream_watches", Help: "Watches the proxy holds on the cluster for its local watches."},
			func() float64 { return float64(h.upstream.Load()) }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Start dials the cluster (in the background: a proxy starts before its
// cluster is reachable, and /readyz says when it is), listens and serves
// until Close.
func Start(cfg Config) (*Proxy, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.watches = &watchHub{p: p, groups: map[string]*group{}}
	p.keepAlives = &kaHub{p: p, up: map[string]*kaUpstream{}}
	if cfg.ReadCacheBytes > 0 {
		p.cache = newReadCache(p, cfg.ReadCacheBytes)
	}
	p.metrics = newMetrics(p.watches, p.cache, p.keepAlives)

	r := manual.NewBuilderWithScheme("dkvproxy")
	var addrs []resolver.Address
	for _, e := range cfg.Endpoints {
		host, _, _ := net.SplitHostPort(e)
		addrs = append(addrs, resolver.Address{Addr: e, ServerName: host})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	creds := insecure.NewCredentials()
	if cfg.UpstreamTLS != nil {
		creds = credentials.NewTLS(cfg.UpstreamTLS)
	}
	conn, err := grpc.NewClient("dkvproxy:///upstream",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	if err != nil {
		return nil, err
	}
	conn.Connect()
	p.conn = conn

	opts := []grpc.ServerOption{grpc.ForceServerCodec(codec{}), grpc.UnknownServiceHandler(p.forward)}
	if cfg.ServerTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.ServerTLS)))
	}
	p.srv = grpc.NewServer(opts...)
	dkvpb.RegisterWatchServer(p.srv, p.watches)
	etcdserverpb.RegisterWatchServer(p.srv, &etcdWatchServer{h: p.watches})
	if p.lis, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
		conn.Close()
		return nil, err
	}
	p.advertise = cfg.AdvertiseAddr
	if p.advertise == "" {
		p.advertise = p.lis.Addr().String()
	}
	if cfg.HTTPAddr != "" {
		if p.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			p.lis.Close()
			conn.Close()
			return nil, err
		}
		if cfg.ServerTLS != nil {
			p.httpLis = tls.NewListener(p.httpLis, cfg.ServerTLS)
		}
		// Outermost, as on a member: a web page that may not use this
		// port is refused before it reaches anything else.
		h := httpguard.New(httpguard.Config{
			Own:          []string{cfg.HTTPAddr, p.httpLis.Addr().String(), cfg.ListenAddr, p.lis.Addr().String(), p.advertise},
			AllowedHosts: cfg.HTTPAllowedHosts,
			Self:         "this proxy",
		}, p.httpHandler())
		p.httpSrv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.httpSrv.Serve(p.httpLis)
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.srv.Serve(p.lis)
	}()
	return p, nil
}

// Addr is the address local clients connect to.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// HTTPAddr is the HTTP address, or "" without one.
func (p *Proxy) HTTPAddr() string {
	if p.httpLis == nil {
		return ""
	}
	return p.httpLis.Addr().String()
}

// LocalWatchers and UpstreamWatches are the values of the metrics of the
// same names.
func (p *Proxy) LocalWatchers() int64   { return p.watches.local.Load() }
func (p *Proxy) UpstreamWatches() int64 { return p.watches.upstream.Load() }

// LocalKeepAlives and UpstreamKeepAlives are the values of
// dkv_proxy_local_keepalive_streams and
// dkv_proxy_upstream_keepalive_streams.
func (p *Proxy) LocalKeepAlives() int64    { return p.keepAlives.local.Load() }
func (p *Proxy) UpstreamKeepAlives() int64 { return p.keepAlives.upstream.Load() }

// ReadCacheBytes is the value of dkv_proxy_read_cache_bytes.
func (p *Proxy) ReadCacheBytes() int64 {
	if p.cache == nil {
		return 0
	}
	return p.cache.size()
}

// Ready reports whether the proxy has a connection to a member.
func (p *Proxy) Ready() bool {
	if p.conn.GetState() == connectivity.Ready {
		return true
	}
	p.conn.Connect()
	return false
}

func (p *Proxy) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.Ready() {
			http.Error(w, "no connection to a cluster member yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Close stops serving: local streams end (their clients resume
// elsewhere or when the proxy is back), upstream watches are cancelled.
func (p *Proxy) Close() error {
	p.cancel()
	p.srv.Stop() // not graceful: watch streams never end by themselves
	if p.httpSrv != nil {
		p.httpSrv.Close()
	}
	p.wg.Wait()
	return p.conn.Close()
}
