package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/lograte"
	"github.com/dkv-io/dkv/internal/storage"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// StateMachine is what committed entries are applied to.
//
// Raftnode does not know what a command is: it hands the state machine the
// bytes of each committed entry, and gets back the proposal id they carried
// (0 if none) and a typed result, delivered to the proposer waiting on that
// id.
type StateMachine[R any] interface {
	// Apply applies one committed command into b and returns the id of
	// the proposal it came from and its result. It must be deterministic:
	// every member applies the same bytes to the same state alike, and
	// bytes it cannot decode are skipped alike.
	Apply(b *pebble.Batch, index uint64, data []byte) (id uint64, res R)
	// ApplyConfChange records the replicated side of an applied
	// membership change (the member table) into b; ctx is the context the
	// proposer attached to the change.
	ApplyConfChange(b *pebble.Batch, cc *raftpb.ConfChangeV2, ctx []byte) error
	// Committing is called just before a batch of applied entries (or an
	// installed snapshot) changes the database; Committed or Restored
	// follows once it has.
	Committing()
	// Committed is called, in log order, after the batch holding the
	// entries up to index has been committed, with their results (the
	// watch hub's hook). It must not block for long.
	Committed(index uint64, results []R)
	// Restored is called after a snapshot replaced the state underneath.
	Restored() error
}

// Transport carries raft messages to peers. Send must not block.
type Transport interface {
	Send(msgs []*raftpb.Message)
}

// Config configures a Node.
type Config[R any] struct {
	ID           uint64
	Storage      *storage.Storage
	StateMachine StateMachine[R]
	Transport    Transport
	// TickInterval is raft's clock: one tick every TickInterval, unless
	// Ticks is set. Proposers' back-off and grace timers are measured in
	// it either way.
	TickInterval  time.Duration
	ElectionTicks int
	// Ticks, when set, replaces the ticker: each value received is one
	// raft tick. Tests send ticks by hand to drive elections, heartbeats
	// and read retries deterministically. Nil means a time.Ticker every
	// TickInterval. It must not be closed while the node runs.
	Ticks <-chan time.Time
	// Peers bootstraps a new cluster; ignored when the storage already
	// holds raft state.
	Peers []raft.Peer
	// Join starts a member with empty state that waits to be sent the log
	// by the leader of an existing cluster.
	Join bool
	// KnownMembers are admitted as senders until a configuration is
	// applied: the members a joining node was told about.
	KnownMembers []uint64
	// SnapshotCount is how many applied entries trigger a log compaction.
	SnapshotCount uint64
	// CatchUpEntries are kept in the log below a compaction, so slightly
	// lagging followers catch up without a snapshot.
	CatchUpEntries uint64
	// LogBytes bounds the log by size as SnapshotCount does by count:
	// once the entries applied since the last compaction hold more than
	// LogBytes bytes, the log is compacted too, keeping at most a quarter
	// of that (and at most CatchUpEntries entries) for catch-up. With
	// large values 15,000 entries are gigabytes. 0: 64 MiB.
	LogBytes uint64
	// ConfChanged, when set, is called after a batch that changed the
	// membership has been committed, or a snapshot was installed.
	ConfChanged func()
	// MemberName, when set, names a member in log lines (the member
	// table's name); nil, or "" from it, means the id in hex.
	MemberName func(id uint64) string
	Logger     *slog.Logger
}

// Node is one running raft member.
type Node[R any] struct {
	cfg   Config[R]
	rn    *raft.RawNode
	log   *slog.Logger
	db    *pebble.DB
	store *storage.Storage

	propc    chan *proposal
	confc    chan *confProposal
	readc    chan *readWaiter
	recvc    chan *raftpb.Message
	transfc  chan uint64
	reportc  chan func(*raft.RawNode)
	stopc    chan struct{}
	donec    chan struct{}
	stopOnce sync.Once

	// applyc feeds committed entries to the apply goroutine, so applying
	// batch k overlaps persisting batch k+1. appliedc wakes the raft loop
	// (to release reads) after each applied batch.
	applyc   chan applyJob
	appliedc chan struct{}

	idPrefix uint64
	idSeq    atomic.Uint64

	waiters waiters[R]

	applied   atomic.Uint64
	committed atomic.Uint64
	term      atomic.Uint64
	lead      atomic.Uint64
	isLeader  atomic.Bool
	leaderCh  atomic.Pointer[chan struct{}] // closed and replaced on each leader change
	appliedCh atomic.Pointer[chan struct{}] // closed and replaced after each apply batch
	confState atomic.Pointer[raftpb.ConfState]
	members   memberSet
	// logLimit keeps messages dropped as impossible (checkAppend,
	// checkAck) from flooding the log: one line per kind per interval.
	logLimit *lograte.Limiter

	stats Stats

	// logSize tracks the bytes of the entries applied since the last
	// log compaction (Config.LogBytes); only the apply path touches it.
	logSize logSize

	// term and vote last persisted; only the raft loop touches them
	durableTerm, durableVote uint64

	// loop is the raft loop's state, only touched on its goroutine (and in
	// Inspect's f).
	loop loop

	// hooks are test instrumentation; nil outside tests.
	hooks *hooks
}

// hooks let in-package tests observe the Ready loop. Each field may be nil.
type hooks struct {
	// persist is called on the raft loop just before a Ready's HardState
	// and entries are written.
	persist func(rd *raft.Ready)
	// confStepped is called on the raft loop right after a conf change
	// was stepped into raft, before the messages already waiting are
	// taken in and the Ready is handled.
	confStepped func()
}

// New creates the raft member from storage (restarting if it has state,
// bootstrapping cfg.Peers otherwise). Run starts it.
func New[R any](cfg Config[R]) (*Node[R], error) {
	if cfg.SnapshotCount == 0 {
		cfg.SnapshotCount = 10000
	}
	if cfg.CatchUpEntries == 0 {
		cfg.CatchUpEntries = 5000
	}
	if cfg.LogBytes == 0 {
		cfg.LogBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	db := cfg.Storage.DB()
	applied, err := storage.AppliedIndex(db)
	if err != nil {
		return nil, err
	}
	cs, err := storage.ConfState(db)
	if err != nil {
		return nil, err
	}
	raftApplied, err := appliedForRaft(cfg.Storage, applied)
	if err != nil {
		return nil, err
	}
	rc := &raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             1,
		Storage:                   cfg.Storage,
		Applied:                   raftApplied,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  64 << 20,
		MaxUncommittedEntriesSize: 256 << 20,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		StepDownOnRemoval:         true,
		Logger:                    &raftLogger{cfg.Logger.With("component", "raft")},
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	if !cfg.Storage.HasRaftState() && !cfg.Join {
		if len(cfg.Peers) == 0 {
			return nil, errors.New("raft: a new node needs bootstrap peers or Join")
		}
		if err := rn.Bootstrap(cfg.Peers); err != nil {
			return nil, fmt.Errorf("raft bootstrap: %w", err)
		}
	}
	n := &Node[R]{
		cfg:      cfg,
		rn:       rn,
		log:      cfg.Logger,
		db:       db,
		store:    cfg.Storage,
		propc:    make(chan *proposal, 4096),
		confc:    make(chan *confProposal),
		readc:    make(chan *readWaiter, 4096),
		recvc:    make(chan *raftpb.Message, 4096),
		transfc:  make(chan uint64, 1),
		reportc:  make(chan func(*raft.RawNode), 256),
		stopc:    make(chan struct{}),
		donec:    make(chan struct{}),
		applyc:   make(chan applyJob, 64),
		appliedc: make(chan struct{}, 1),
		waiters:  waiters[R]{m: make(map[uint64]chan R)},
		idPrefix: (cfg.ID & 0xffff) << 48,
		stats:    newStats(),
		logLimit: lograte.New(logDropEvery),
		loop:     loop{reads: readBatcher{retryTicks: uint64(cfg.ElectionTicks)}},
	}
	n.idSeq.Store(uint64(time.Now().UnixMilli()) << 8 & (1<<48 - 1))
	n.applied.Store(applied)
	n.confState.Store(cs)
	for _, p := range cfg.Peers {
		n.members.known = append(n.members.known, p.ID)
	}
	n.members.known = append(n.members.known, cfg.KnownMembers...)
	n.members.setApplied(cs)
	if err := n.scanPendingConfChanges(applied); err != nil {
		return nil, err
	}
	lc := make(chan struct{})
	n.leaderCh.Store(&lc)
	ac := make(chan struct{})
	n.appliedCh.Store(&ac)
	return n, nil
}

// appliedForRaft is the applied index to restart raft with: the state's
// own (applied), but no further than what the durable log knows is
// committed. The two differ after a snapshot install: the transport
// writes the sender's state as of when it streams it, which can be
// entries past the snapshot's index (installSnapshot), while the
// HardState's commit is the snapshot's index until the leader's next
// appends raise it. A member stopped in between restarts with its state
// ahead of its commit, which raft refuses with a panic ("applied(...)
// is out of range [prevApplied(...), committed(...)]"). Raft is told the
// commit instead; the entries between come again once committed, and
// apply skips those already in the state (n.applied is the state's).
func appliedForRaft(st *storage.Storage, applied uint64) (uint64, error) {
	hs, _, err := st.InitialState()
	if err != nil {
		return 0, err
	}
	first, err := st.FirstIndex()
	if err != nil {
		return 0, err
	}
	// With no HardState raft starts with its commit at the snapshot.
	commit := max(hs.GetCommit(), first-1)
	return min(applied, commit), nil
}

// Run starts the Ready loop and returns at once.
func (n *Node[R]) Run() { go n.run() }

// Stop stops the loop and fails pending callers with ErrStopped.
func (n *Node[R]) Stop() {
	n.stopOnce.Do(func() { close(n.stopc) })
	<-n.donec
}

// Abandon stops the loop taking work and fails pending callers with
// ErrStopped, like Stop, but does not wait for the loop to end: after a
// storage failure the loop may be parked for good inside the storage.
func (n *Node[R]) Abandon() {
	n.stopOnce.Do(func() { close(n.stopc) })
}

// NextID returns a request id unique across the cluster and restarts.
func (n *Node[R]) NextID() uint64 { return n.idPrefix | (n.idSeq.Add(1) & (1<<48 - 1)) }
