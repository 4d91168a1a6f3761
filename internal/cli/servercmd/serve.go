package servercmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/cli"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/server"
	"github.com/spf13/cobra"
)

func serveCmd(a *cli.App) *cobra.Command {
	var cfg server.Config
	var drift float64
	var renewWindow time.Duration
	var logFormat, configFile string
	var printCfg bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a DKV node until SIGINT or SIGTERM",
		Long: `Run a DKV node. With no flags it is a single-node store with its data in
./dkv-data. For a cluster, start every member with its own --name and
--peer-addr and the same --initial-cluster n1=host:port,n2=... and
--initial-cluster-token (or --peer-secret-file, or peer TLS): the peer
secret keeps strangers off the peer port. A member that joins later with
--join is started with the same token or secret file (docs/cluster.md).

An empty address (--http-addr "") disables that listener. Once listening,
serve prints its addresses on stdout; logs go to stderr (--log-format text
or json). SIGINT or SIGTERM stops the node cleanly: a leader first hands
leadership to the most caught-up voter (docs/operations.md#rolling-restarts).

TLS (docs/security.md): --cert-file/--key-file turn on TLS on the client
gRPC port and HTTPS on the HTTP port; --client-cert-auth also requires a
client certificate signed by --trusted-ca-file. --peer-cert-file,
--peer-key-file and --peer-trusted-ca-file turn on mutual TLS between
members. Certificate and key files are re-read when they change, and on
SIGHUP.

Every flag can also be set by an environment variable, DKV_ and the
flag's name in capitals with underscores (DKV_DATA_DIR for --data-dir),
and in a YAML file given with --config-file (or DKV_CONFIG_FILE) whose
keys are the flags' names (data-dir: /var/lib/dkv). The command line
wins over the environment, which wins over the file. Sizes take units:
512MiB, 8GiB, 100MB. --print-config prints the configuration that would
be used, saying where each value came from, and exits.`,
		Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// LocalFlags: serve's own, not the client flags it inherits.
			from, err := applyConfig(cmd.LocalFlags(), os.Environ(), a.Stderr())
			if err != nil {
				return err
			}
			if cfg.Logger, err = newServeLogger(a.Stderr(), logFormat); err != nil {
				return err
			}
			if cfg.LeaseMaxClockDrift, err = leaseMaxClockDrift(drift); err != nil {
				return err
			}
			if cfg.LeaseRenewWindow, err = leaseRenewWindow(renewWindow); err != nil {
				return err
			}
			switch {
			case cfg.CorruptCheckInterval == 0:
				cfg.CorruptCheckInterval = -1 // 0 on the command line: off
			case cfg.CorruptCheckInterval < 0:
				return cli.Usagef("--corrupt-check-interval %v is negative (0 turns the check off)", cfg.CorruptCheckInterval)
			}
			if cfg.BackupDir != "" && (cfg.BackupInterval < time.Second || cfg.BackupKeep < 1) {
				return cli.Usagef("--backup-interval must be at least 1s and --backup-keep at least 1")
			}
			if printCfg {
				check := cfg
				check.EnsureDefaults()
				if err := check.Validate(); err != nil {
					return cli.Usagef("%v", err)
				}
				return printConfig(a.Stdout(), cmd.LocalFlags(), from)
			}
			return serve(a, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, configFileFlag, "", "YAML file of settings, keyed by flag name (data-dir: /var/lib/dkv); flags and DKV_* variables win over it (env DKV_CONFIG_FILE)")
	f.BoolVar(&printCfg, printConfigFlag, false, "print the effective configuration as a --config-file, with where each value came from, and exit")
	f.StringVar(&logFormat, "log-format", "text", `log lines on stderr: "text" (key=value) or "json" (one JSON object a line, for log shippers)`)
	f.StringVar(&cfg.DataDir, "data-dir", "./dkv-data", "directory for the database")
	f.StringVar(&cfg.ClientAddr, "client-addr", "127.0.0.1:7861", "gRPC listen address for clients")
	f.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:7863", "HTTP listen address: JSON API, /metrics, /livez, /readyz")
	f.StringVar(&cfg.PeerAddr, "peer-addr", "127.0.0.1:7862", "raft peer listen address")
	f.StringVar(&cfg.Name, "name", "default", "this member's name, unique in the cluster")
	f.StringVar(&cfg.InitialCluster, "initial-cluster", "", "name=peerAddr,... of a new cluster (default: this node alone)")
	f.StringVar(&cfg.InitialClusterState, "initial-cluster-state", "", `"new" to bootstrap --initial-cluster, "existing" to join (default: existing with --join, else new)`)
	f.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "", "secret the members prove to each other on the peer port; give every member the same one, including members that join later (kept in the data dir; never sent over the client port)")
	f.StringVar(&cfg.PeerSecretFile, "peer-secret-file", "", "file holding the peer secret in hex, instead of --initial-cluster-token (e.g. a copy of a member's DATA-DIR/peer-secret; make one with: openssl rand -hex 32)")
	f.BoolVar(&cfg.InsecurePeer, "insecure-peer", false, "let a multi-node cluster or a joining member start with no --initial-cluster-token, --peer-secret-file or peer TLS: anyone who can reach a peer port can then write (warned about at every start and on /readyz)")
	f.StringSliceVar(&cfg.Join, "join", nil, "client endpoints of a running cluster to join as a learner (comma separated)")
	f.StringVar(&cfg.AdvertiseClientAddr, "advertise-client-addr", "", "client address other members and discovering clients dial (default: the bound --client-addr; set it when that is 0.0.0.0 or ::)")
	f.StringVar(&cfg.AdvertisePeerAddr, "advertise-peer-addr", "", "peer address the other members dial, as named in --initial-cluster (default --peer-addr; set it when that is 0.0.0.0 or ::)")
	f.DurationVar(&cfg.RequestTimeout, "request-timeout", server.DefaultRequestTimeout, "server-side limit on a request that carries no deadline; lock and election waits are exempt and wait as long as their caller")
	f.Var(newByteSize(&cfg.MaxValueBytes, 1<<20), "max-value-bytes", "largest value accepted")
	f.IntVar(&cfg.MaxTxnOps, "max-txn-ops", 128, "most operations in one transaction")
	f.Int64Var(&cfg.AutoCompactRevisions, "auto-compact-revisions", 0, "keep only the last N revisions (0: off)")
	f.DurationVar(&cfg.AutoCompactPeriod, "auto-compact-period", 0, "keep only the revisions of this last period (0: off)")
	f.Float64Var(&drift, "lease-max-clock-drift", server.DefaultLeaseMaxClockDrift,
		"how much faster or slower any member's clock may run, as a fraction: leases never expire early within it, and may live up to TTL*(1+d)/(1-d); 0 assumes equal clock rates")
	f.DurationVar(&renewWindow, "lease-renew-window", server.DefaultLeaseRenewWindow,
		"the leader answers a keep-alive from memory when it renewed that lease through raft at most this long ago; a leader change may then let a lease live this much longer (0: every keep-alive waits for a raft round)")
	f.IntVar(&cfg.MaxConnections, "max-connections", 0, fmt.Sprintf("most client connections (gRPC and HTTP) open at once (0: %d, or fewer if the open file limit is lower)", server.DefaultMaxConnections))
	f.StringSliceVar(&cfg.HTTPAllowedHosts, "http-allowed-hosts", nil, "host names the HTTP port answers to besides this member's own addresses (--http-addr, --client-addr, --advertise-client-addr), localhost and loopback IPs; other Host headers get 421, against DNS rebinding (comma separated; * for any)")
	f.StringSliceVar(&cfg.CORSAllowedOrigins, "cors-allowed-origins", nil, "web origins (scheme://host[:port]) besides the HTTP port's own whose pages may call the HTTP API from a browser; requests and CORS preflights from other origins are refused (comma separated)")
	f.BoolVar(&cfg.MetricsOpen, "metrics-open", false, "serve /metrics without credentials even with auth enabled (otherwise it needs a token or client certificate of any user then)")
	f.BoolVar(&cfg.Pprof, "pprof", false, "serve /debug/pprof on the HTTP address (root only with auth enabled)")
	f.DurationVar(&cfg.AuthTokenTTL, "auth-token-ttl", server.DefaultAuthTokenTTL, "how long a token from Authenticate is accepted")
	f.IntVar(&cfg.AuthBcryptCost, "auth-bcrypt-cost", 0, "bcrypt cost of stored password hashes (0: bcrypt's default, 10; 4 to 31)")
	f.Var(newByteSize(&cfg.QuotaBytes, 0), "quota-bytes", "refuse writes that add data (NoSpace) while the database takes more than this on disk, until compaction brings it back under (0: no quota)")
	f.Var(newByteSize(&cfg.SpaceReserveBytes, 0), "space-reserve-bytes", "refuse writes that add data (NoSpace) while the data dir's filesystem has less free space than this (default: 128MiB, at most an eighth of the filesystem; negative: off)")
	f.StringVar(&cfg.ClientTLS.CertFile, "cert-file", "", "TLS certificate (PEM) of the client gRPC and HTTP ports; turns TLS on there")
	f.StringVar(&cfg.ClientTLS.KeyFile, "key-file", "", "TLS key (PEM) of --cert-file")
	f.StringVar(&cfg.ClientTLS.TrustedCAFile, "trusted-ca-file", "", "CA certificates (PEM) that sign client certificates (and, for member-to-member calls, the members' client-port certificates)")
	f.BoolVar(&cfg.ClientTLS.ClientCertAuth, "client-cert-auth", false, "refuse clients without a certificate signed by --trusted-ca-file")
	f.StringVar(&cfg.PeerTLS.CertFile, "peer-cert-file", "", "this member's TLS certificate (PEM) on the peer port, presented as server and as client; turns on mutual TLS between members")
	f.StringVar(&cfg.PeerTLS.KeyFile, "peer-key-file", "", "TLS key (PEM) of --peer-cert-file")
	f.StringVar(&cfg.PeerTLS.TrustedCAFile, "peer-trusted-ca-file", "", "CA certificates (PEM) that sign the members' peer certificates")
	f.StringSliceVar(&cfg.PeerTLS.AllowedNames, "peer-cert-allowed-cn", nil, "admit on the peer port only member certificates with this CN or DNS/IP SAN (repeatable, comma separated; default: any signed by --peer-trusted-ca-file)")
	f.StringVar(&cfg.TLSMinVersion, "tls-min-version", "1.2", "oldest TLS version accepted on every port: 1.2 or 1.3")
	f.DurationVar(&cfg.CorruptCheckInterval, "corrupt-check-interval", server.DefaultCorruptCheckInterval, "how often members compare state hashes (and once at start); a member that differs gets a CORRUPT alarm and refuses clients (0: off)")
	f.StringVar(&cfg.BackupDir, "backup-dir", "", "while this member leads, write a backup (as dkv snapshot save) into this directory every --backup-interval (default: none)")
	f.DurationVar(&cfg.BackupInterval, "backup-interval", time.Hour, "how often the leader writes a scheduled backup (with --backup-dir)")
	f.IntVar(&cfg.BackupKeep, "backup-keep", 24, "how many scheduled backups to keep in --backup-dir; older ones are deleted")
	f.Var(newByteSize(&cfg.CacheBytes, server.DefaultCacheBytes), "cache-bytes", "storage engine block cache for table blocks, in bytes (at least 1 MiB; the memtables' share comes on top): matters at millions of keys, where every put reads the key's previous record")
	f.Uint64Var(&cfg.SnapshotCount, "snapshot-count", 0, "compact the raft log once it holds this many applied entries beyond --snapshot-catchup-entries (0: 10000)")
	f.Uint64Var(&cfg.CatchUpEntries, "snapshot-catchup-entries", 0, "applied entries a raft log compaction keeps for followers slightly behind; one further behind is sent a snapshot (0: 5000)")
	f.Var(newByteSize(&cfg.RaftLogSegmentBytes, 0), "raft-log-segment-bytes", "size at which the raft log (raftlog/ in the data dir) moves to a new segment file; whole segments are deleted at log compaction (default: 4MiB; 64KiB to 1GiB)")
	f.Var(newByteSize(&cfg.BallastBytes, 0), "ballast-bytes", "size of the ballast file kept in the data dir and released if the disk fills up anyway (default: the largest request, --max-value-bytes plus 4MiB, at least 4MiB; negative: none)")
	serverOnly(cmd)
	return cmd
}

// advertised notes an advertised address that differs from the bound one.
func advertised(bound, adv string) string {
	if adv == "" || adv == bound {
		return ""
	}
	return " (advertised as " + adv + ")"
}

// leaseMaxClockDrift maps --lease-max-clock-drift to the config, where 0
// means the default and no drift at all is a negative value.
func leaseMaxClockDrift(flag float64) (float64, error) {
	switch {
	case !(flag >= 0 && flag < 0.5):
		return 0, cli.Usagef("--lease-max-clock-drift %v out of range [0, 0.5)", flag)
	case flag == 0:
		return -1, nil
	}
	return flag, nil
}

// leaseRenewWindow maps --lease-renew-window to the config, where 0 means
// the default and off is a negative value.
func leaseRenewWindow(flag time.Duration) (time.Duration, error) {
	switch {
	case flag < 0 || flag > server.MaxLeaseRenewWindow:
		return 0, cli.Usagef("--lease-renew-window %v out of range [0, %v] (0 turns it off)", flag, server.MaxLeaseRenewWindow)
	case flag == 0:
		return -1, nil
	}
	return flag, nil
}

// serveGCPercent is the garbage collector's target (GOGC) of dkv serve
// when the GOGC environment variable does not set one. A member's heap is
// small beside what it allocates per request (Pebble's block cache and
// memtables are sized on their own), so at Go's default of 100 the
// collector ran often: in paired runs 200 did 1.07-1.15x the puts and
// serializable gets at 0.9x the CPU per op, for about 15% more peak RSS,
// while 400 gained nothing more and took another 30-60% (BENCHMARKS.md,
// "Log truncation that waits for Pebble's flushes, and the garbage
// collector's target").
const serveGCPercent = 200

// setGCPercent applies serveGCPercent unless the operator set GOGC.
func setGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
}

func serve(a *cli.App, cfg server.Config) error {
	setGCPercent(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(cfg)
	if err != nil {
		return cli.Usagef("%v", err)
	}
	// Start in the background so that a signal, or a storage failure,
	// ends the process at once even while it is still opening.
	started := make(chan error, 1)
	go func() { started <- srv.Start(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			srv.Stop()
			return startErr("starting", err)
		}
	case <-srv.Failed():
		return startErr("storage failed", srv.Err())
	case <-ctx.Done():
		return fmt.Errorf("interrupted while starting")
	}
	show := func(addr string) string {
		if addr == "" {
			return "(off)"
		}
		return addr
	}
	// SIGHUP re-reads the certificates (they are also re-read when
	// their files change).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	hupDone := make(chan struct{})
	defer func() { signal.Stop(hup); close(hupDone) }()
	go func() {
		for {
			select {
			case <-hup:
			case <-hupDone:
				return
			}
			if err := srv.ReloadTLS(); err != nil {
				cfg.Logger.Error("SIGHUP: re-reading the TLS certificates failed; the previous ones stay in use", "err", err)
			} else {
				cfg.Logger.Info("SIGHUP: TLS certificates re-read")
			}
		}
	}()
	fmt.Fprintf(a.Stdout(), "dkv member %q listening\n  client gRPC: %s%s\n  HTTP:        %s\n  peer:        %s%s\n  data dir:    %s\n",
		cfg.Name, show(srv.ClientAddr()), advertised(srv.ClientAddr(), srv.AdvertisedClientAddr()),
		show(srv.HTTPAddr()), show(srv.PeerAddr()), advertised(srv.PeerAddr(), srv.AdvertisedPeerAddr()), cfg.DataDir)
	if t := tlsSummary(cfg); t != "" {
		fmt.Fprintf(a.Stdout(), "  TLS:         %s\n", t)
	}
	select {
	case <-srv.Ready():
		fmt.Fprintln(a.Stdout(), "ready")
	case <-ctx.Done():
	case <-srv.Failed(): // reported just below
	}
	select {
	case <-ctx.Done():
	case <-srv.Removed():
		fmt.Fprintln(a.Stdout(), "removed from the cluster")
	case <-srv.Failed():
		srv.Stop()
		if errors.Is(srv.Err(), storage.ErrDamaged) {
			fmt.Fprintln(a.Stdout(), "stopped: data damaged")
		}
		return startErr("storage failed", srv.Err())
	}
	fmt.Fprintln(a.Stdout(), "shutting down")
	done := make(chan error, 1)
	go func() { done <- srv.Stop() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("stopping: %w", err)
		}
	case <-time.After(30 * time.Second):
		return fmt.Errorf("stopping: still not stopped after 30s")
	case <-srv.Failed():
		return startErr("storage failed", srv.Err())
	}
	fmt.Fprintln(a.Stdout(), "stopped")
	return nil
}

// tlsSummary says which ports use TLS ("" for none).
func tlsSummary(cfg server.Config) string {
	var parts []string
	if c := cfg.ClientTLS; c.Enabled() {
		s := "client gRPC and HTTPS"
		if c.ClientCertAuth {
			s += " (client certificates required)"
		}
		parts = append(parts, s)
	}
	if cfg.PeerTLS.Enabled() {
		parts = append(parts, "peer (mutual)")
	}
	return strings.Join(parts, ", ")
}

// startErr makes a full disk exit with the NoSpace code and message; a
// damaged data dir's error already says what to do.
func startErr(what string, err error) error {
	if errors.Is(err, storage.ErrDiskFull) {
		return &client.Error{Kind: client.ErrNoSpace, Msg: what + ": " + err.Error()}
	}
	if errors.Is(err, storage.ErrDamaged) {
		return err
	}
	if errors.Is(err, server.ErrNoPeerSecret) {
		return cli.Usagef("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
