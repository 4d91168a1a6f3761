package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/lograte"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/raftnode"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/transport"
	"github.com/dkv-io/dkv/internal/watch"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Version is the server's version, major.minor.patch. A member publishes
// it in the member table; members whose versions are more than one minor
// apart refuse to run together (version.go). A var so that a build can set
// it (-ldflags "-X github.com/dkv-io/dkv/server.Version=0.3.0"), as the
// upgrade tests do.
var Version = "0.3.0"

// Server is one DKV node.
type Server struct {
	cfg Config
	log *slog.Logger

	store   *storage.Storage
	kv      *mvcc.Store
	sm      *state.Machine // the replicated state machine; owns kv
	node    *raftnode.Node[state.Result]
	limits  mvcc.Limits
	metrics *metrics

	sessCheck oldMemberCheck // session.go

	memberID   uint64
	clusterID  uint64
	peerSecret []byte
	// insecurePeer: the peer secret is one anybody can derive, and no
	// peer TLS guards the port (noteDerived).
	insecurePeer atomic.Bool

	grpcSrv   *grpc.Server
	clientLis net.Listener
	transport *transport.GRPC
	peerSrv   *grpc.Server
	peerLis   net.Listener
	inproc    *bufconn.Listener
	gwInproc  *bufconn.Listener // the HTTP gateway's own in-process pipe (tls.go, gatewayAddr)
	tls       *tlsState
	httpSrv   *http.Server
	// The client port's HTTP/1.1 side (clienthttp.go): its connections,
	// server and in-process gateway connection; nil with TLS.
	clientHTTPLis net.Listener
	clientHTTPSrv *http.Server
	clientGWConn  *grpc.ClientConn
	httpLis       net.Listener
	gwConn        *grpc.ClientConn
	// clientSlots counts client gRPC and HTTP connections (listen.go).
	clientSlots *connLimit

	ready    chan struct{}
	stopc    chan struct{}
	stopOnce sync.Once
	stopErr  error
	wg       sync.WaitGroup
	// watchRecv counts the Watch streams' receive goroutines, which
	// create watches (reading the store) and can outlive their handler;
	// stop waits for them before closing the store.
	watchRecv sync.WaitGroup
	purgeKick chan struct{}
	// purged is the compact revision the history purge has reached
	// (purgeLoop).
	purged    atomic.Int64
	lessor    *lease.Lessor // lease table; tracks deadlines on the leader
	renewer   *renewer      // group-commits keep-alives
	watchHub  *watch.Hub
	lockWait  lockWaiters // wakes Acquire calls waiting for a grant
	tokens    tokenCache  // auth tokens already verified (auth.go)
	logins    *loginGuard // failed-login throttle, bcrypt slots (logins.go)
	deniedLog *lograte.Limiter

	removed     chan struct{}
	removedOnce sync.Once

	failed     chan struct{} // closed when the storage failed for good (damage, or Pebble cannot go on)
	failedOnce sync.Once
	failErr    error
	running    atomic.Bool  // Start has finished
	contacts   contactTable // when each member was last heard from

	localFull atomic.Value // string: why this member measured no space, "" if it has
	// ballastOwed: the ballast file was released (at open on a full
	// disk, or at ENOSPC) and is not back yet; until there is room for
	// it, the space it held is not free (alarm.go, measureSpace).
	ballastOwed atomic.Bool
	diskFullHit atomic.Bool   // a write met ENOSPC since the last measurement
	diskFulls   atomic.Uint64 // writes that met ENOSPC (ballast released)
	spaceKick   chan struct{}

	stateMu     sync.Mutex
	started     bool // Start was called
	stopped     bool // Stop was called
	nodeRunning bool // the raft Ready loop runs (node.Stop waits for it)
	dirLock     *dirLock
	advClient   string // the client URL published in the member table
	advPeer     string // the peer URL this member is known by
}

// New validates cfg and returns a Server that is not yet started.
func New(cfg Config) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Server{
		cfg:       cfg,
		log:       cfg.Logger.With("member", cfg.Name),
		ready:     make(chan struct{}),
		stopc:     make(chan struct{}),
		purgeKick: make(chan struct{}, 1),
		removed:   make(chan struct{}),
		spaceKick: make(chan struct{}, 1),
		failed:    make(chan struct{}),
		logins:    newLoginGuard(cfg.AuthBcryptCost),
		deniedLog: lograte.New(10 * time.Second),
	}, nil
}

// Start binds the listeners, opens the data directory and starts raft.
// It returns once the listeners are bound; Ready is closed once the node
// can serve. ctx bounds the start-up itself (joining a cluster). If Start
// fails, it has already released everything it took (listeners, data
// dir); Stop may still be called and returns at once.
func (s *Server) Start(ctx context.Context) (err error) {
	s.stateMu.Lock()
	switch {
	case s.started:
		s.stateMu.Unlock()
		return errors.New("server already started")
	case s.stopped:
		s.stateMu.Unlock()
		return errors.New("server already stopped")
	}
	s.started = true
	s.stateMu.Unlock()
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if err := s.setupTLS(); err != nil {
		return err
	}
	// Client and HTTP listeners first: a port in use is the likeliest
	// start-up failure and the cheapest to report.
	if err := s.bindListeners(); err != nil {
		return err
	}
	s.resolveAdvertised()
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if s.dirLock, err = lockDataDir(s.cfg.DataDir); err != nil {
		return err
	}
	st, err := storage.Open(s.cfg.DataDir, storage.Options{
		NoSync: s.cfg.NoSync, FS: s.cfg.FS, Logger: s.log, OnDamage: s.damaged,
		Fatal: s.onStorageFatal, BallastBytes: s.cfg.BallastBytes, LargestWrite: int64(s.maxRequestBytes()), OnDiskFull: s.onDiskFull,
		CacheBytes:   s.cfg.CacheBytes,
		SegmentBytes: s.cfg.RaftLogSegmentBytes,
	})
	if err != nil {
		return err // a *storage.DamageError says what is damaged and what to do
	}
	s.store = st
	if st.BallastReleasedAtOpen() {
		s.ballastOwed.Store(true)
	}
	// Started on a nearly full disk: read-only from the first request,
	// and the alarm raised before Ready (waitReady).
	if why, _, err := s.measureSpace(); err == nil && why != "" {
		s.localFull.Store(why)
		s.log.Warn("NOSPACE at start: refusing writes that add data until space is freed", "reason", why)
	}
	if err := s.startNode(ctx); err != nil {
		if d := st.Damage(); d != nil {
			return d // corruption found while loading the state
		}
		return err
	}
	s.metrics = newMetrics(s)
	if err := s.startGRPC(); err != nil {
		return err
	}
	if err := s.startHTTP(ctx); err != nil {
		return err
	}
	if err := s.startClientHTTP(); err != nil { // clienthttp.go
		return err
	}
	s.wg.Add(3)
	go s.waitReady()
	go s.autoCompactLoop()
	go s.purgeLoop()
	s.wg.Add(5)
	go s.layoutLoop()
	go s.leaseLoop()
	go s.renewer.loop()
	go s.spaceLoop()
	go s.sessionLoop()
	if s.cfg.CorruptCheckInterval > 0 {
		s.wg.Add(1)
		go s.corruptLoop()
	}
	s.startBackups()
	s.running.Store(true)
	if s.Err() != nil {
		go s.Stop() // the storage failed while starting
	}
	return nil
}

// Stop shuts the node down and closes the database. It is idempotent,
// and safe before Start, after a failed Start, and twice. After a storage
// failure (Failed) the database cannot be closed (Pebble's commit
// pipeline is parked on the failed write): Stop stops the node without
// waiting for it, leaves the database open until the process exits, and
// returns the failure.
func (s *Server) Stop() error {
	done := make(chan struct{})
	go func() { s.stop(); close(done) }()
	select {
	case <-done:
	case <-s.failed:
		// A safety net: stop does not wait for the parked storage.
		select {
		case <-done:
		case <-time.After(3 * time.Second):
		}
	}
	if s.hasFailed() {
		return s.failErr
	}
	return s.stopErr
}

func (s *Server) stop() {
	s.stopOnce.Do(func() {
		s.stateMu.Lock()
		s.stopped = true
		s.stateMu.Unlock()
		// While every listener still serves: requests arriving during
		// the transfer are forwarded to the new leader as on any
		// follower.
		if s.running.Load() && s.nodeRunning && !s.hasFailed() {
			s.handOffLeadership()
		}
		close(s.stopc)
		if s.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.httpSrv.Shutdown(ctx)
			cancel()
		} else if s.httpLis != nil {
			_ = s.httpLis.Close()
		}
		if s.clientHTTPSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = s.clientHTTPSrv.Shutdown(ctx)
			cancel()
		}
		if s.gwConn != nil {
			_ = s.gwConn.Close()
		}
		if s.clientGWConn != nil {
			_ = s.clientGWConn.Close()
		}
		if s.grpcSrv != nil {
			done := make(chan struct{})
			go func() { s.grpcSrv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				s.grpcSrv.Stop()
			}
		}
		if s.clientLis != nil {
			_ = s.clientLis.Close() // bound but never served
		}
		if s.peerSrv != nil {
			s.peerSrv.Stop()
		} else if s.peerLis != nil {
			_ = s.peerLis.Close()
		}
		failed := s.hasFailed()
		if s.nodeRunning {
			if failed {
				// The Ready loop may be parked in the failed storage
				// for good; waiting for it would hang Stop.
				s.node.Abandon()
			} else {
				// raftnode.Stop waits for the Ready loop: only once it
				// runs.
				s.node.Stop()
			}
		}
		if s.transport != nil {
			s.transport.Close()
		}
		s.wg.Wait()
		if failed {
			// Pebble cannot continue: its commit pipeline is parked on
			// the failed write and Close would wait for it forever. The
			// process is expected to exit (docs/reliability.md); the
			// data directory stays locked until it does.
			return
		}
		s.watchRecv.Wait() // a watch being created reads the store
		if s.store != nil {
			if err := s.store.Sync(); err != nil {
				s.stopErr = err
			}
			if err := s.store.Close(); err != nil && s.stopErr == nil {
				s.stopErr = err
			}
		}
		if s.dirLock != nil {
			s.dirLock.release()
		}
	})
}

// waitReady closes Ready once a linearizable read succeeds: there is a
// leader and this node has applied everything committed before it.
func (s *Server) waitReady() {
	defer s.wg.Done()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.node.WaitLinearizable(ctx)
		if err == nil {
			// A node that starts short of space reports ready only
			// with its alarm committed: no write gets in between.
			err = s.raiseAlarmBeforeReady(ctx)
		}
		cancel()
		if err == nil {
			close(s.ready)
			s.publishClientURL()
			s.log.Info("dkv node ready", "member_id", fmt.Sprint(s.memberID), "revision", s.kv.Revision())
			return
		}
		select {
		case <-s.stopc:
			return
		default:
		}
	}
}

// damaged is the storage's report of corruption found while running: the
// node stops applying (raftnode), Failed is closed and the server stops
// itself.
func (s *Server) damaged(err error) {
	s.failedOnce.Do(func() {
		s.failErr = err
		s.log.Error("stopping: data damaged", "err", err)
		close(s.failed)
		if s.running.Load() {
			// Not here: Pebble calls this from inside a read that Stop
			// would wait for.
			go s.Stop()
		}
	})
}

// Failed is closed when the node's storage failed and it cannot go on:
// its data was found damaged, or Pebble cannot continue (a full disk that
// even the ballast could not relieve). It then stops itself, and Err says
// why; the process should exit.
func (s *Server) Failed() <-chan struct{} { return s.failed }

func (s *Server) hasFailed() bool {
	select {
	case <-s.failed:
		return true
	default:
		return false
	}
}

// Err is why Failed was closed (a *storage.DamageError, or a storage
// failure), or nil.
func (s *Server) Err() error {
	select {
	case <-s.failed:
		return s.failErr
	default:
		return nil
	}
}

// Ready is closed once the node has a leader and has applied its log up to
// what was committed at that point.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// ClientAddr is the bound gRPC address ("" without a listener).
func (s *Server) ClientAddr() string {
	if s.clientLis == nil {
		return ""
	}
	return s.clientLis.Addr().String()
}

// AdvertisedClientAddr is the client URL this member publishes in the
// member table for discovery ("" without a client listener).
func (s *Server) AdvertisedClientAddr() string { return s.advClient }

// AdvertisedPeerAddr is the peer URL the other members dial.
func (s *Server) AdvertisedPeerAddr() string { return s.advPeer }

// HTTPAddr is the bound HTTP address ("" without a listener).
func (s *Server) HTTPAddr() string {
	if s.httpLis == nil {
		return ""
	}
	return s.httpLis.Addr().String()
}

// DialInProcess returns a gRPC connection to this server over an in-memory
// pipe: the embedded client's transport. Close it before Stop.
func (s *Server) DialInProcess(ctx context.Context) (*grpc.ClientConn, error) {
	return s.dialPipe(s.inproc)
}

func (s *Server) dialPipe(pipe *bufconn.Listener) (*grpc.ClientConn, error) {
	if pipe == nil {
		return nil, errors.New("server not started")
	}
	return grpc.NewClient("passthrough:///inprocess",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return pipe.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxSendMsgBytes), grpc.MaxCallSendMsgSize(s.maxRequestBytes())),
	)
}

// IsLeader reports whether this node is the raft leader.
func (s *Server) IsLeader() bool { return s.node.Status().IsLeader }

// LeaderID is the leader this node knows (0 for none).
func (s *Server) LeaderID() uint64 { return s.node.Status().Lead }

// AppliedIndex is the raft index applied to the state machine.
func (s *Server) AppliedIndex() uint64 { return s.node.Status().Applied }

// CommitIndex is the raft index known committed.
func (s *Server) CommitIndex() uint64 { return s.node.Status().Commit }
