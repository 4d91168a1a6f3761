package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/dkv-io/dkv/internal/httpguard"
	"github.com/dkv-io/dkv/internal/proxy"
	"github.com/dkv-io/dkv/internal/tlsutil"
	"github.com/spf13/cobra"
)

func (a *App) proxyCmd() *cobra.Command {
	var cfg proxy.Config
	var certFile, keyFile, trustedCA string
	var clientCertAuth bool
	var readCacheBytes int64
	var shareKeepAlives bool
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run a local proxy to the cluster that shares watches, until SIGINT or SIGTERM",
		Long: `Run a proxy on an application host (docs/proxy.md). Local clients connect
to --listen-addr and speak DKV's gRPC API or the etcd v3 API to it; the
proxy forwards every call to the cluster at --endpoints (connecting with
--cacert, --cert and --key), with the caller's credentials. Watches of
DKV's Watch API on the same keys, with the same options and the same
credentials share one upstream watch. Serializable reads of the current
revision are answered from a cache of up to --read-cache-bytes (0 turns
it off), kept current by a watch per caller identity. Lease keep-alive
streams (DKV's and etcd's) with the same credentials share one upstream
stream (--share-keepalives). Member lists name the proxy
(--advertise-addr) as every member's client address, so clients that
discover endpoints stay on it.

--cert-file and --key-file serve TLS on --listen-addr and --http-addr;
--client-cert-auth also requires a client certificate signed by
--trusted-ca-file. --http-addr serves /metrics, /livez and /readyz (ready
once a member is reachable); "" disables it. Like a member's HTTP port it
answers /metrics only to requests whose Host header names one of the
proxy's addresses, localhost, a loopback IP or a name in
--http-allowed-hosts (421 otherwise), against DNS rebinding.`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			eps, err := a.endpointList()
			if err != nil {
				return err
			}
			cfg.Endpoints, cfg.UpstreamTLS = eps, a.tls.cfg
			cfg.NoKeepAliveSharing = !shareKeepAlives
			for _, h := range cfg.HTTPAllowedHosts {
				if err := httpguard.CheckAllowedHost(h); err != nil {
					return Usagef("%v", err)
				}
			}
			switch {
			case readCacheBytes < 0:
				return Usagef("--read-cache-bytes %d must not be negative", readCacheBytes)
			case readCacheBytes == 0:
				cfg.ReadCacheBytes = -1 // off
			default:
				cfg.ReadCacheBytes = readCacheBytes
			}
			if cfg.ServerTLS, err = proxyServerTLS(certFile, keyFile, trustedCA, clientCertAuth); err != nil {
				return err
			}
			cfg.Logger = slog.New(slog.NewTextHandler(a.Stderr(), nil))
			p, err := proxy.Start(cfg)
			if err != nil {
				return err
			}
			defer p.Close()
			fmt.Fprintf(a.Stdout(), "proxy listening on %s", p.Addr())
			if h := p.HTTPAddr(); h != "" {
				fmt.Fprintf(a.Stdout(), ", http %s", h)
			}
			fmt.Fprintf(a.Stdout(), "; upstream %v\n", eps)
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.ListenAddr, "listen-addr", "127.0.0.1:7871", "gRPC listen address for local clients")
	f.StringVar(&cfg.AdvertiseAddr, "advertise-addr", "", "address member lists give as every member's client address, so discovering clients stay on the proxy (default: the bound --listen-addr)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7873", "HTTP listen address: /metrics, /livez, /readyz")
	f.StringSliceVar(&cfg.HTTPAllowedHosts, "http-allowed-hosts", nil, "host names the HTTP port answers to besides the proxy's own addresses (--http-addr, --listen-addr, --advertise-addr), localhost and loopback IPs; other Host headers get 421, against DNS rebinding (comma separated; * for any)")
	f.StringVar(&certFile, "cert-file", "", "TLS certificate (PEM) of --listen-addr and --http-addr; turns TLS on there")
	f.StringVar(&keyFile, "key-file", "", "key (PEM) of --cert-file")
	f.StringVar(&trustedCA, "trusted-ca-file", "", "CA certificates (PEM) that sign local clients' certificates")
	f.BoolVar(&clientCertAuth, "client-cert-auth", false, "refuse local clients without a certificate signed by --trusted-ca-file")
	f.IntVar(&cfg.MaxLocalQueue, "max-local-queue", 4096, "responses a local watch stream may have waiting before the proxy ends it (its client resumes from its revision)")
	f.Int64Var(&readCacheBytes, "read-cache-bytes", 64<<20, "bytes of serializable read responses the proxy caches (0: no cache)")
	f.BoolVar(&shareKeepAlives, "share-keepalives", true, "local lease keep-alive streams (DKV's and etcd's) with the same credentials share one upstream stream")
	return cmd
}

// proxyServerTLS is the TLS the proxy serves with, nil for plaintext.
func proxyServerTLS(certFile, keyFile, trustedCA string, clientCertAuth bool) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		if clientCertAuth || trustedCA != "" {
			return nil, Usagef("--client-cert-auth and --trusted-ca-file need --cert-file and --key-file")
		}
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, Usagef("--cert-file and --key-file go together")
	case clientCertAuth && trustedCA == "":
		return nil, Usagef("--client-cert-auth needs --trusted-ca-file")
	}
	r, err := tlsutil.NewReloader(certFile, keyFile)
	if err != nil {
		return nil, Usagef("--cert-file/--key-file: %v", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	if trustedCA != "" {
		pool, err := tlsutil.LoadPool(trustedCA)
		if err != nil {
			return nil, Usagef("--trusted-ca-file: %v", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if clientCertAuth {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return cfg, nil
}
