package server

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dkv-io/dkv/internal/httpguard"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/tlsutil"
	"github.com/dkv-io/dkv/internal/transport"
	"github.com/dkv-io/dkv/server/httpapi"
	"golang.org/x/crypto/bcrypt"
)

// Config configures one DKV node. The zero value, after EnsureDefaults, is
// a single-node store named "default" with its data in ./dkv-data and no
// listeners: an embedded node reached in-process (DialInProcess). Set
// ClientAddr, PeerAddr and HTTPAddr to serve on ports; `dkv serve` sets
// them to 127.0.0.1:7861, :7862 and :7863.
type Config struct {
	// Name is this member's name; it must be unique in the cluster.
	Name string
	// DataDir holds the Pebble database (raft log and state).
	DataDir string
	// ClientAddr is the gRPC listen address. Empty means no gRPC listener
	// (an embedded node reached only in-process).
	ClientAddr string
	// PeerAddr is the raft peer transport listen address. Empty means no
	// peer listener: a single node that will never have peers (embedded).
	PeerAddr string
	// HTTPAddr is the HTTP/JSON gateway, /metrics, /livez and /readyz
	// listen address. Empty means none.
	HTTPAddr string
	// InitialCluster is "name=peerAddr,..." for a new cluster; empty means
	// a single node named Name at PeerAddr.
	InitialCluster string
	// InitialClusterState is "new" (bootstrap InitialCluster) or
	// "existing" (join a running cluster; needs Join).
	InitialClusterState string
	// Join lists client endpoints of a running cluster. A new member
	// asks them to add it (as a learner) and learns the cluster from them.
	Join []string
	// InitialClusterToken is the secret the members prove to each other on
	// the peer port (etcd's --initial-cluster-token): every member of a
	// cluster, including one that joins later, is started with the same
	// one. It is used when a member's data dir is created and kept there
	// (peer-secret). The peer secret never travels over the client API.
	// A multi-node bootstrap or a join needs it, PeerSecretFile or PeerTLS,
	// unless InsecurePeer (ErrNoPeerSecret); a single node without it
	// picks a random secret.
	InitialClusterToken string
	// PeerSecretFile names a file holding the peer secret in hex (at
	// least 16 bytes; a copy of a member's <data-dir>/peer-secret will
	// do): the alternative to InitialClusterToken.
	PeerSecretFile string
	// InsecurePeer lets a multi-node bootstrap or a join start without a
	// peer secret chosen by the operator or peer TLS: the secret is then
	// derived from the cluster id, which is public, so anyone who reaches
	// a peer port can write. Warned about at every start, on /readyz and
	// on the dashboard.
	InsecurePeer bool
	// AdvertiseClientAddr is the client URL other members and clients use
	// to reach this node, published in the member table for discovery.
	// Default: the bound client address (so port 0 advertises the port
	// actually bound). Set it when ClientAddr is a wildcard such as
	// 0.0.0.0:7861, which nobody else can dial.
	AdvertiseClientAddr string
	// AdvertisePeerAddr is the peer URL the other members dial (default
	// PeerAddr). It names this member in InitialCluster, so the two must
	// be equal; set it when PeerAddr is a wildcard (0.0.0.0:7862).
	AdvertisePeerAddr string
	// RequestTimeout bounds a request that carries no deadline of its
	// own (default DefaultRequestTimeout): a proposal lost in a leader
	// change must not wait forever. Blocking waits (a lock Acquire with
	// wait, and so an election Campaign) are exempt: they wait as long
	// as the caller's context allows.
	RequestTimeout time.Duration
	// ClientTLS turns on TLS for the client gRPC port and the HTTP port
	// (HTTPS), PeerTLS mutual TLS on the peer port (docs/security.md).
	// The zero values are plaintext.
	ClientTLS TLSFiles
	PeerTLS   TLSFiles
	// TLSMinVersion is the oldest TLS version accepted on every port:
	// "1.2" (the default, also "") or "1.3".
	TLSMinVersion string
	// PeerFaults, when set, injects network faults into the peer
	// transport (tests only).
	PeerFaults *transport.Faults
	// MaxValueBytes is the largest value accepted (default 1 MiB).
	MaxValueBytes int
	// MaxTxnOps is the most ops one txn may hold (default 128).
	MaxTxnOps int
	// AutoCompactRevisions, when > 0, keeps only the last N revisions.
	AutoCompactRevisions int64
	// AutoCompactPeriod, when > 0, keeps only the revisions of the last
	// period.
	AutoCompactPeriod time.Duration
	// TickInterval is the raft tick (default 100ms); elections happen
	// after ElectionTicks ticks without a leader (default 10).
	TickInterval  time.Duration
	ElectionTicks int
	// LeaseCheckpointInterval is how often the leader records each
	// lease's remaining TTL through raft (default 5s). A lease whose
	// leader dies expires at most TTL + election timeout + this interval
	// after its last keep-alive (docs/leases.md).
	LeaseCheckpointInterval time.Duration
	// LeaseTick is how often the leader looks for expired leases and
	// leases due a checkpoint (default 50ms): expiry is that much late at
	// most, on top of one raft round.
	LeaseTick time.Duration
	// LeaseClock, when set, replaces the monotonic clock the leader
	// measures lease deadlines with (tests skew or advance it).
	LeaseClock interface{ Now() time.Time }
	// LeaseMaxClockDrift is how much faster or slower than real time any
	// member's clock may run, as a fraction (default 0.01, i.e. ±1 %;
	// must be below 0.5). Leases never expire early as long as every
	// member is within it, and may live up to (1+d)/(1-d) times their TTL
	// (docs/leases.md). A negative value assumes no drift at all, as etcd
	// does (`dkv serve --lease-max-clock-drift 0`).
	LeaseMaxClockDrift float64
	// LeaseRenewWindow lets the leader answer a keep-alive from memory
	// when its own renewal of that lease, through raft, was proposed at
	// most this long ago (default DefaultLeaseRenewWindow; negative: off,
	// every keep-alive waits for a raft round). A leader change may let a
	// lease live up to this much longer (docs/leases.md).
	LeaseRenewWindow time.Duration
	// MaxConnections caps the client connections (gRPC and HTTP together)
	// open at once; more wait in the kernel's backlog until one closes.
	// Default DefaultMaxConnections, lowered to what RLIMIT_NOFILE leaves
	// after the descriptors kept for Pebble and peers; a value the limit
	// cannot hold is refused at Start (docs/cluster.md, "Limits").
	MaxConnections int
	// HTTPAllowedHosts are the host names, besides this member's own
	// addresses (listen and advertised, client and HTTP), localhost and
	// loopback IPs, that the HTTP port answers to (a "host" or
	// "host:port"; the port is ignored). Another Host header gets 421: a
	// DNS name an attacker rebinds to this member reads nothing through a
	// browser (httpapi.Guard). "*" allows any, for a port only reached
	// through a proxy that checks names itself.
	HTTPAllowedHosts []string
	// CORSAllowedOrigins are the web origins (scheme://host[:port])
	// besides the HTTP port's own whose pages may call the HTTP API from
	// a browser; requests from other origins are refused 403, and their
	// CORS preflights too.
	CORSAllowedOrigins []string
	// MetricsOpen serves /metrics without credentials even with auth
	// enabled; otherwise it needs a token or client certificate of any
	// user then (metric labels name queues, which are keys).
	MetricsOpen bool
	// Pprof serves /debug/pprof on the HTTP address (root only with auth
	// enabled).
	Pprof bool
	// AuthTokenTTL is how long a token from Authenticate is accepted.
	// Default DefaultAuthTokenTTL.
	AuthTokenTTL time.Duration
	// AuthBcryptCost is the bcrypt cost of stored password hashes. Default
	// bcrypt.DefaultCost; tests lower it to bcrypt.MinCost.
	AuthBcryptCost int
	// NoSync skips fsync of the raft log. Only for tests and benchmarks
	// of the CPU path: an acknowledged write may be lost on power loss.
	NoSync bool
	// UnsafeLocalReads is a deliberately broken mode, for the reliability
	// suite only (tests/chaos): linearizable reads are served from local
	// state without the ReadIndex wait, so a partitioned or lagging node
	// returns stale data. It exists to prove the linearizability checker
	// catches a broken build; never set it anywhere else.
	UnsafeLocalReads bool
	// QuotaBytes, when > 0, caps the database's size on disk (Pebble's
	// WAL, tables and manifests; like etcd's --quota-backend-bytes): over
	// it this member raises the cluster's NOSPACE alarm and writes that
	// add data are refused with NoSpace until compaction and deletes bring
	// it back under. 0 (the default) is no quota; the free-space reserve
	// still applies.
	QuotaBytes int64
	// CacheBytes is the storage engine's block cache for table blocks
	// (default DefaultCacheBytes; at least 1 MiB); the memtables, which
	// the engine charges to the same cache, get room on top of it. A key
	// space whose filter and index blocks outgrow it is read from the OS
	// page cache or the disk, at a CPU cost per read and per write (a put
	// reads the key's previous record).
	CacheBytes int64
	// SpaceReserveBytes is the free disk space below which this member
	// raises the NOSPACE alarm (0, the default: DefaultSpaceReserveBytes,
	// but at most an eighth of the filesystem; negative: off). It leaves
	// room for what is in flight, deletes and compaction.
	SpaceReserveBytes int64
	// BallastBytes is the size of the ballast file kept in the data dir
	// (0, the default: sized to the store, its memtable's size, 16 to 64
	// MiB; negative: none). If the disk fills up anyway
	// (another process wrote to it), the ballast is deleted and the write
	// retried, so Pebble does not fail; it is recreated once there is
	// room again.
	BallastBytes int64
	// SpaceCheckInterval is how often free space and the database size
	// are measured (default 1s).
	SpaceCheckInterval time.Duration
	// CorruptCheckInterval is how often this member compares its state
	// hash with the other members' (corrupt.go); it also does at start.
	// Default 5m; negative: never.
	CorruptCheckInterval time.Duration
	// BackupDir, when set, has the leader write a backup (the format of
	// 'dkv snapshot save') there every BackupInterval, keeping the newest
	// BackupKeep (backup.go).
	BackupDir      string
	BackupInterval time.Duration
	BackupKeep     int
	// FS, when set, replaces the OS filesystem for everything the
	// storage layer keeps in the data dir: Pebble's files, the durability
	// witness, the ballast and staged snapshots (tests use vfs.NewMem(),
	// or storage.NewFaultFS to inject ENOSPC and report a small disk).
	// The data dir itself, its lock file and the peer secret stay on the
	// real disk, and a backup (Maintenance.Snapshot) reads its checkpoint
	// back from the real disk, so it needs the real disk. Nil is the real
	// disk.
	FS vfs.FS
	// SnapshotCount and CatchUpEntries set when the raft log is
	// compacted: once it holds SnapshotCount+CatchUpEntries applied
	// entries, all but the last CatchUpEntries are dropped (0: raftnode's
	// defaults, 10000 and 5000). A follower behind the compacted log is
	// sent a snapshot; tests lower both to reach that path with a few
	// writes.
	SnapshotCount  uint64
	CatchUpEntries uint64
	// RaftLogSegmentBytes is the size at which the raft log moves to a
	// new segment file (0: storage.DefaultSegmentBytes, 4 MiB; 64 KiB to
	// 1 GiB).
	RaftLogSegmentBytes int64
	Logger              *slog.Logger
}

// Defaults of the disk-space settings.
const (
	DefaultSpaceReserveBytes = 128 << 20
	DefaultCacheBytes        = 64 << 20
)

// DefaultLeaseMaxClockDrift is the default Config.LeaseMaxClockDrift: 1 %,
// generous next to real clocks (quartz drifts about 0.01 %, NTP slews at
// most 0.05 %) for at most 2 % longer leases.
const DefaultLeaseMaxClockDrift = 0.01

// DefaultLeaseRenewWindow is the default Config.LeaseRenewWindow: as long
// as the default election timeout, so a leader change costs a lease that
// nobody keeps alive at most about twice the wait it already costs.
const DefaultLeaseRenewWindow = time.Second

// MaxLeaseRenewWindow bounds Config.LeaseRenewWindow.
const MaxLeaseRenewWindow = time.Minute

// EnsureDefaults fills unset fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Name == "" {
		c.Name = "default"
	}
	if c.DataDir == "" {
		c.DataDir = "dkv-data"
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = 1 << 20
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = 128
	}
	if c.TickInterval == 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.LeaseCheckpointInterval == 0 {
		c.LeaseCheckpointInterval = 5 * time.Second
	}
	if c.LeaseTick == 0 {
		c.LeaseTick = 50 * time.Millisecond
	}
	if c.LeaseMaxClockDrift == 0 {
		c.LeaseMaxClockDrift = DefaultLeaseMaxClockDrift
	}
	if c.LeaseRenewWindow == 0 {
		c.LeaseRenewWindow = DefaultLeaseRenewWindow
	}
	if c.InitialClusterState == "" {
		c.InitialClusterState = "new"
		if len(c.Join) > 0 {
			c.InitialClusterState = "existing"
		}
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.AuthTokenTTL == 0 {
		c.AuthTokenTTL = DefaultAuthTokenTTL
	}
	if c.AuthBcryptCost == 0 {
		c.AuthBcryptCost = bcrypt.DefaultCost
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.SpaceCheckInterval == 0 {
		c.SpaceCheckInterval = time.Second
	}
	if c.CorruptCheckInterval == 0 {
		c.CorruptCheckInterval = DefaultCorruptCheckInterval
	}
	if c.BackupInterval == 0 {
		c.BackupInterval = time.Hour
	}
	if c.BackupKeep == 0 {
		c.BackupKeep = 24
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if c.MaxValueBytes < 0 || c.MaxValueBytes > 64<<20 {
		return fmt.Errorf("max value bytes %d out of range (0, 64 MiB]", c.MaxValueBytes)
	}
	if c.MaxTxnOps < 0 || c.MaxTxnOps > 10000 {
		return fmt.Errorf("max txn ops %d out of range (0, 10000]", c.MaxTxnOps)
	}
	if c.AuthBcryptCost < bcrypt.MinCost || c.AuthBcryptCost > bcrypt.MaxCost {
		return fmt.Errorf("--auth-bcrypt-cost %d out of range [%d, %d]", c.AuthBcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	if c.AuthTokenTTL < time.Second {
		return fmt.Errorf("--auth-token-ttl %v is under a second", c.AuthTokenTTL)
	}
	if c.AutoCompactRevisions < 0 || c.AutoCompactPeriod < 0 {
		return fmt.Errorf("auto-compaction settings must not be negative")
	}
	if c.LeaseCheckpointInterval < 0 || c.LeaseTick < 0 {
		return fmt.Errorf("lease checkpoint interval and lease tick must not be negative")
	}
	if c.LeaseRenewWindow > MaxLeaseRenewWindow {
		return fmt.Errorf("lease renew window %v is over the limit of %v (a leader change may let a lease live that much longer)", c.LeaseRenewWindow, MaxLeaseRenewWindow)
	}
	// Written so that NaN fails too. At 0.5 and beyond a lease could live
	// three times its TTL or more, which is no longer a lease.
	if !(c.LeaseMaxClockDrift < 0.5) {
		return fmt.Errorf("lease max clock drift %v must be below 0.5 (a fraction: 0.01 lets member clocks run 1%% fast or slow)", c.LeaseMaxClockDrift)
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("max connections %d must not be negative (0: the default)", c.MaxConnections)
	}
	if c.QuotaBytes < 0 {
		return fmt.Errorf("quota bytes %d must not be negative (0: no quota)", c.QuotaBytes)
	}
	if c.QuotaBytes > 0 && c.QuotaBytes < 16<<20 {
		return fmt.Errorf("quota bytes %d is below the 16 MiB minimum (an empty database already takes several MiB)", c.QuotaBytes)
	}
	if b := c.RaftLogSegmentBytes; b != 0 && (b < 64<<10 || b > 1<<30) {
		return fmt.Errorf("--raft-log-segment-bytes %d is outside [64 KiB, 1 GiB] (0: the default, %d)", b, storage.DefaultSegmentBytes)
	}
	if c.CacheBytes < 1<<20 {
		return fmt.Errorf("cache bytes %d is below the 1 MiB minimum (0: the default, %d)", c.CacheBytes, DefaultCacheBytes)
	}
	if c.BackupDir != "" && (c.BackupInterval < time.Second || c.BackupKeep < 1) {
		return fmt.Errorf("backup interval %v must be at least 1s and backup keep %d at least 1", c.BackupInterval, c.BackupKeep)
	}
	if c.SpaceCheckInterval < 0 {
		return fmt.Errorf("space check interval must not be negative")
	}
	if c.ElectionTicks < 2 {
		return fmt.Errorf("election ticks %d must be at least 2", c.ElectionTicks)
	}
	switch c.InitialClusterState {
	case "new":
	case "existing":
		if len(c.Join) == 0 {
			return fmt.Errorf("initial cluster state \"existing\" needs --join with the client endpoints of a running member")
		}
	default:
		return fmt.Errorf("initial cluster state %q must be \"new\" or \"existing\"", c.InitialClusterState)
	}
	if c.InitialClusterToken != "" && c.PeerSecretFile != "" {
		return fmt.Errorf("give --initial-cluster-token or --peer-secret-file, not both")
	}
	if c.PeerSecretFile != "" {
		if _, err := ReadPeerSecretFile(c.PeerSecretFile); err != nil {
			return err
		}
	}
	if c.InitialCluster != "" && c.PeerAddr == "" {
		return fmt.Errorf("a cluster member needs a peer address")
	}
	if strings.ContainsAny(c.Name, "=,") {
		return fmt.Errorf("name %q must not contain '=' or ','", c.Name)
	}
	if err := c.ClientTLS.validate(""); err != nil {
		return err
	}
	if len(c.ClientTLS.AllowedNames) > 0 {
		return fmt.Errorf("allowed certificate names are a peer port setting (--peer-cert-allowed-cn)")
	}
	if err := c.PeerTLS.validate("peer-"); err != nil {
		return err
	}
	if c.PeerTLS.ClientCertAuth {
		return fmt.Errorf("the peer port always requires a member certificate; client cert auth is a client port setting (--client-cert-auth)")
	}
	if _, err := tlsutil.ParseMinVersion(c.TLSMinVersion); err != nil {
		return fmt.Errorf("--tls-min-version: %w", err)
	}
	for _, o := range c.CORSAllowedOrigins {
		if _, err := httpapi.ParseOrigin(o); err != nil {
			return fmt.Errorf("--cors-allowed-origins: %v", err)
		}
	}
	for _, h := range c.HTTPAllowedHosts {
		if err := httpguard.CheckAllowedHost(h); err != nil {
			return err
		}
	}
	if c.RequestTimeout < 0 {
		return fmt.Errorf("request timeout %v must not be negative", c.RequestTimeout)
	}
	if c.InitialClusterState == "new" && c.InitialCluster != "" {
		ms, err := parseInitialCluster(c)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if adv := c.advertisedPeer(); m.name == c.Name && m.peerURL != adv {
				return fmt.Errorf("this member's entry in --initial-cluster is %s=%s, but it advertises peer address %s (--peer-addr, or --advertise-peer-addr): "+
					"the other members would dial %s; make them equal, or set --advertise-peer-addr %s if that is how peers reach this member",
					m.name, m.peerURL, adv, m.peerURL, m.peerURL)
			}
		}
	}
	return nil
}

// advertisedPeer is the peer address this member is configured to be
// known by.
func (c *Config) advertisedPeer() string {
	if c.AdvertisePeerAddr != "" {
		return c.AdvertisePeerAddr
	}
	return c.PeerAddr
}
