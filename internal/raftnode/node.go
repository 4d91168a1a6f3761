package raftnode

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
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
	ID            uint64
	Storage       *storage.Storage
	StateMachine  StateMachine[R]
	Transport     Transport
	TickInterval  time.Duration
	ElectionTicks int
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
	// ConfChanged, when set, is called after a batch that changed the
	// membership has been committed, or a snapshot was installed.
	ConfChanged func()
	Logger      *slog.Logger
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

	mu      sync.Mutex
	waiters map[uint64]chan R

	applied   atomic.Uint64
	committed atomic.Uint64
	term      atomic.Uint64
	lead      atomic.Uint64
	isLeader  atomic.Bool
	leaderCh  atomic.Pointer[chan struct{}] // closed and replaced on each leader change
	appliedCh atomic.Pointer[chan struct{}] // closed and replaced after each apply batch
	confState atomic.Pointer[raftpb.ConfState]
	members   memberSet
	diverge   divergence

	stats Stats

	// term and vote last persisted; only the raft loop touches them
	durableTerm, durableVote uint64
}

// Stats are counters exported as metrics.
type Stats struct {
	Proposals     atomic.Uint64
	ProposalsDrop atomic.Uint64
	// ProposalsUnknown counts proposals answered "outcome unknown" because
	// the leader changed while they were pending and they were not applied.
	ProposalsUnknown atomic.Uint64
	ReadRounds       atomic.Uint64
	AppliedBatch     atomic.Uint64
	PendingProps     atomic.Int64
	LeaderChanges    atomic.Uint64
	Readies          atomic.Uint64
	// LogDivergence counts appends from the leader that showed this
	// member's committed log differs from the leader's (see checkAppend).
	LogDivergence atomic.Uint64

	// Where a write's time goes: the synced raft log write of a Ready,
	// the apply of a committed batch (one Pebble commit), and a
	// proposal from hand-off to raft to its applied result.
	PersistSeconds  prometheus.Histogram
	ApplySeconds    prometheus.Histogram
	ProposalSeconds prometheus.Histogram
}

func newStats() Stats {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "dkv", Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18),
		})
	}
	return Stats{
		PersistSeconds:  h("raft_persist_seconds", "Synced raft log writes (entries and HardState of one Ready), fsync included."),
		ApplySeconds:    h("apply_seconds", "Applying one batch of committed entries, Pebble commit included."),
		ProposalSeconds: h("proposal_seconds", "Proposals made on this member, from hand-off to raft to the applied result."),
	}
}

type proposal struct {
	data []byte
	errc chan error
}

type confProposal struct {
	cc    raftpb.ConfChangeI
	errc  chan error
	index uint64 // where the leader appended it (set before errc fires)
}

type readWaiter struct {
	done chan struct{}
}

// ErrStopped is returned by calls on a stopped node.
var ErrStopped = dkverr.New(dkverr.Unavailable, "node is shutting down")

// New creates the raft member from storage (restarting if it has state,
// bootstrapping cfg.Peers otherwise). Run starts it.
func New[R any](cfg Config[R]) (*Node[R], error) {
	if cfg.SnapshotCount == 0 {
		cfg.SnapshotCount = 10000
	}
	if cfg.CatchUpEntries == 0 {
		cfg.CatchUpEntries = 5000
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
	rc := &raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             1,
		Storage:                   cfg.Storage,
		Applied:                   applied,
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
		waiters:  make(map[uint64]chan R),
		idPrefix: (cfg.ID & 0xffff) << 48,
		stats:    newStats(),
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

// Run starts the Ready loop and returns at once.
func (n *Node[R]) Run() { go n.run() }

// Stop stops the loop and fails pending callers with ErrStopped.
func (n *Node[R]) Stop() {
	n.stopOnce.Do(func() { close(n.stopc) })
	<-n.donec
}

// NextID returns a request id unique across the cluster and restarts.
func (n *Node[R]) NextID() uint64 { return n.idPrefix | (n.idSeq.Add(1) & (1<<48 - 1)) }

// Propose replicates req and waits for its result. While there is no
// leader the proposal is retried until ctx ends (Unavailable). A ctx that
// ends after the proposal was handed to raft leaves the outcome unknown.
func (n *Node[R]) Propose(ctx context.Context, id uint64, data []byte) (R, error) {
	var zero R
	if id == 0 {
		return zero, errors.New("raftnode: proposal without an id")
	}
	ch := make(chan R, 1)
	n.mu.Lock()
	n.waiters[id] = ch
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.waiters, id)
		n.mu.Unlock()
	}()
	n.stats.Proposals.Add(1)
	start := time.Now()
	var changed <-chan struct{}
	for {
		p := &proposal{data: data, errc: make(chan error, 1)}
		changed = n.LeaderChanged()
		n.stats.PendingProps.Add(1)
		select {
		case n.propc <- p:
		case <-ctx.Done():
			n.stats.PendingProps.Add(-1)
			return zero, ctxErr(ctx, false)
		case <-n.stopc:
			n.stats.PendingProps.Add(-1)
			return zero, ErrStopped
		}
		var perr error
		select {
		case perr = <-p.errc:
		case <-ctx.Done():
			return zero, ctxErr(ctx, true)
		case <-n.stopc:
			return zero, ErrStopped
		}
		if perr == nil {
			break
		}
		if !errors.Is(perr, raft.ErrProposalDropped) {
			return zero, perr
		}
		// Dropped: no leader known right now. Wait for one, then retry.
		n.stats.ProposalsDrop.Add(1)
		if err := n.waitLeaderChange(ctx); err != nil {
			return zero, err
		}
	}
	// A proposal can be lost with a leader that fails or is cut off (a
	// follower forwards it, and raft never reports the loss). Once a new
	// leader is known, one that survived is applied promptly; after
	// lostProposalGrace more the outcome is reported unknown, instead of
	// holding the caller until its deadline.
	var (
		giveUp <-chan time.Time
		timer  *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case res := <-ch:
			n.stats.ProposalSeconds.Observe(time.Since(start).Seconds())
			return res, nil
		case <-changed:
			changed = n.LeaderChanged()
			if n.lead.Load() == 0 {
				giveUp = nil // an election is under way: wait for its leader
				continue
			}
			if timer != nil {
				timer.Stop()
			}
			timer = time.NewTimer(n.lostProposalGrace())
			giveUp = timer.C
		case <-giveUp:
			n.stats.ProposalsUnknown.Add(1)
			return zero, fmt.Errorf("%w: the raft leader changed while it was pending, and it was not applied within %v of a new leader being known", ErrUnknownOutcome, n.lostProposalGrace())
		case <-ctx.Done():
			return zero, ctxErr(ctx, true)
		case <-n.stopc:
			return zero, ErrStopped
		}
	}
}

// lostProposalGrace is how long after a new leader is known a proposal
// pending across the change may still be applied before it is reported
// with an unknown outcome: two election timeouts.
func (n *Node[R]) lostProposalGrace() time.Duration {
	return 2 * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
}

func (n *Node[R]) waitLeaderChange(ctx context.Context) error {
	ch := *n.leaderCh.Load()
	if n.lead.Load() != raft.None {
		// A leader is known but dropped it (e.g. transferring): back off.
		t := time.NewTimer(n.cfg.TickInterval)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctxErr(ctx, false)
		case <-n.stopc:
			return ErrStopped
		}
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx, false)
	case <-n.stopc:
		return ErrStopped
	}
}

// ErrUnknownOutcome marks a write whose deadline passed after it was handed
// to raft: it may or may not have been applied.
var ErrUnknownOutcome = errors.New("outcome unknown: the request may or may not have been applied")

func ctxErr(ctx context.Context, sent bool) error {
	if sent {
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, ctx.Err())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return dkverr.New(dkverr.Unavailable, "no raft leader before the deadline")
	}
	return ctx.Err()
}

// ProposeConfChange proposes a membership change and waits until it is
// applied (ConfState reflects it).
func (n *Node[R]) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error {
	for {
		p := &confProposal{cc: cc, errc: make(chan error, 1)}
		select {
		case n.confc <- p:
		case <-ctx.Done():
			return ctxErr(ctx, false)
		case <-n.stopc:
			return ErrStopped
		}
		var err error
		select {
		case err = <-p.errc:
		case <-ctx.Done():
			return ctxErr(ctx, true)
		}
		if errors.Is(err, raft.ErrProposalDropped) {
			if err := n.waitLeaderChange(ctx); err != nil {
				return err
			}
			continue
		}
		if errors.Is(err, errConfChangePending) {
			if err := n.WaitLinearizable(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if p.index > 0 {
			// Proposed on the leader at a known index: wait for it to
			// apply here (this works even when it removes this member).
			err = n.WaitApplied(ctx, p.index)
		} else {
			// Forwarded from a follower: a fresh read index covers it.
			err = n.WaitLinearizable(ctx)
		}
		if err != nil {
			return err
		}
		// raft silently turns a conf change into an empty entry while an
		// earlier one is not yet applied (and right after an election):
		// only the applied configuration says whether it took effect.
		if confChangeTook(n.confState.Load(), cc) {
			return nil
		}
		n.log.Debug("conf change was not applied by raft; retrying", "change", cc.AsV2().String())
		t := time.NewTimer(n.cfg.TickInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return dkverr.New(dkverr.Unavailable, "membership change not applied before the deadline (another change was pending)")
		}
	}
}

// confChangeTook reports whether every change in cc is reflected in cs.
func confChangeTook(cs *raftpb.ConfState, cc raftpb.ConfChangeI) bool {
	in := func(ids []uint64, id uint64) bool {
		for _, x := range ids {
			if x == id {
				return true
			}
		}
		return false
	}
	for _, ch := range cc.AsV2().GetChanges() {
		id := ch.GetNodeId()
		voter := in(cs.GetVoters(), id)
		learner := in(cs.GetLearners(), id) || in(cs.GetLearnersNext(), id)
		switch ch.GetType() {
		case raftpb.ConfChangeAddNode:
			if !voter {
				return false
			}
		case raftpb.ConfChangeAddLearnerNode:
			if !learner {
				return false
			}
		case raftpb.ConfChangeRemoveNode:
			if voter || learner {
				return false
			}
		}
	}
	return true
}

// TransferLeadership asks the leader to hand leadership to id.
func (n *Node[R]) TransferLeadership(ctx context.Context, id uint64) error {
	select {
	case n.transfc <- id:
	case <-ctx.Done():
		return ctxErr(ctx, false)
	case <-n.stopc:
		return ErrStopped
	}
	for n.lead.Load() != id {
		ch := *n.leaderCh.Load()
		if n.lead.Load() == id {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return dkverr.New(dkverr.Unavailable, "leadership did not move to %x before the deadline", id)
		case <-n.stopc:
			return ErrStopped
		}
	}
	return nil
}

// WaitLinearizable returns once this node has applied everything committed
// before the call: a read of local state after it is linearizable.
func (n *Node[R]) WaitLinearizable(ctx context.Context) error {
	w := &readWaiter{done: make(chan struct{})}
	select {
	case n.readc <- w:
	case <-ctx.Done():
		return ctxErr(ctx, false)
	case <-n.stopc:
		return ErrStopped
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return dkverr.New(dkverr.Unavailable, "linearizable read: no quorum confirmed before the deadline")
	case <-n.stopc:
		return ErrStopped
	}
}

// WaitApplied returns once index has been applied locally.
func (n *Node[R]) WaitApplied(ctx context.Context, index uint64) error {
	for n.applied.Load() < index {
		ch := *n.appliedCh.Load()
		if n.applied.Load() >= index {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stopc:
			return ErrStopped
		}
	}
	return nil
}

// Step hands a message received from a peer to raft.
func (n *Node[R]) Step(ctx context.Context, m *raftpb.Message) error {
	select {
	case n.recvc <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
}

// ReportUnreachable tells raft a peer could not be reached.
func (n *Node[R]) ReportUnreachable(id uint64) {
	n.report(func(rn *raft.RawNode) { rn.ReportUnreachable(id) })
}

// ReportSnapshot tells raft how sending a snapshot to id ended.
func (n *Node[R]) ReportSnapshot(id uint64, st raft.SnapshotStatus) {
	n.report(func(rn *raft.RawNode) { rn.ReportSnapshot(id, st) })
}

// Inspect runs f on the raft loop's goroutine (f must not block) and
// waits for it: the way to read leader-only state such as progress.
func (n *Node[R]) Inspect(ctx context.Context, f func(rn *raft.RawNode)) error {
	done := make(chan struct{})
	select {
	case n.reportc <- func(rn *raft.RawNode) { f(rn); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	}
}

func (n *Node[R]) report(f func(*raft.RawNode)) {
	select {
	case n.reportc <- f:
	case <-n.stopc:
	}
}

// Status is a snapshot of raft's view, for Status calls and metrics.
type Status struct {
	ID, Lead, Term, Commit, Applied uint64
	IsLeader                        bool
	ConfState                       *raftpb.ConfState
}

// Status reports the node's raft state without touching the loop.
func (n *Node[R]) Status() Status {
	return Status{
		ID: n.cfg.ID, Lead: n.lead.Load(), Term: n.term.Load(),
		Commit: n.committed.Load(), Applied: n.applied.Load(),
		IsLeader: n.isLeader.Load(), ConfState: n.confState.Load(),
	}
}

// Stats exposes counters.
func (n *Node[R]) Stats() *Stats { return &n.stats }

// LeaderChanged returns a channel closed at the next leader change.
func (n *Node[R]) LeaderChanged() <-chan struct{} { return *n.leaderCh.Load() }

// readRound is one in-flight ReadIndex request and the readers it serves.
type readRound struct {
	id      []byte
	readers []*readWaiter
	sentAt  time.Time
}

type pendingRead struct {
	index   uint64
	readers []*readWaiter
}

func (n *Node[R]) run() {
	applyDone := make(chan struct{})
	go n.runApply(applyDone)
	defer func() {
		close(n.applyc)
		<-applyDone
		close(n.donec)
	}()
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()

	var (
		queued   []*readWaiter // readers waiting for the next round
		inflight *readRound    // the round raft is working on
		waiting  []pendingRead // rounds answered, waiting for apply
		readSeq  uint64        // fresh id per round
		props    []*raftpb.Entry
		perrs    []chan error
		// conf changes this leader appended, waiting for their index
		pendingConfs []*confProposal
	)
	retryAfter := time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval

	// stepProps hands raft every proposal waiting now as one MsgProp.
	stepProps := func(p *proposal) {
		// A fresh slice each time: on a follower raft forwards these
		// entries to the leader in a message the transport encodes
		// later, so the backing array must not be reused.
		props, perrs = make([]*raftpb.Entry, 0, 1+len(n.propc)), perrs[:0]
		props = append(props, &raftpb.Entry{Data: p.data})
		perrs = append(perrs, p.errc)
	drain:
		for len(props) < 4096 {
			select {
			case p := <-n.propc:
				props = append(props, &raftpb.Entry{Data: p.data})
				perrs = append(perrs, p.errc)
			default:
				break drain
			}
		}
		n.stats.PendingProps.Add(-int64(len(props)))
		err := n.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(n.cfg.ID), Entries: props})
		for _, c := range perrs {
			c <- err
		}
	}
	stepRecv := func(m *raftpb.Message) {
		if n.checkAppend(m) {
			return
		}
		if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			n.log.Debug("raft step", "type", m.GetType(), "err", err)
		}
	}

	startRound := func() {
		if inflight != nil || len(queued) == 0 {
			return
		}
		readSeq++
		id := make([]byte, 16)
		binary.BigEndian.PutUint64(id, n.NextID())
		binary.BigEndian.PutUint64(id[8:], readSeq)
		inflight = &readRound{id: id, readers: queued, sentAt: time.Now()}
		queued = nil
		n.stats.ReadRounds.Add(1)
		n.rn.ReadIndex(id)
	}
	releaseReads := func() {
		applied := n.applied.Load()
		kept := waiting[:0]
		for _, pr := range waiting {
			if pr.index <= applied {
				for _, r := range pr.readers {
					close(r.done)
				}
				continue
			}
			kept = append(kept, pr)
		}
		waiting = kept
	}

	for {
		select {
		case <-ticker.C:
			n.rn.Tick()
			if inflight != nil && time.Since(inflight.sentAt) > retryAfter {
				// Lost (no leader, dropped message): retry with a new id.
				queued = append(inflight.readers, queued...)
				inflight = nil
			}
			startRound()
		case p := <-n.propc:
			stepProps(p)
		case p := <-n.confc:
			err := n.stepConfChange(p)
			if err == nil && n.rn.BasicStatus().RaftState == raft.StateLeader {
				// Answered when the entry shows up in a Ready, with its
				// index.
				pendingConfs = append(pendingConfs, p)
			} else {
				p.errc <- err
			}
		case r := <-n.readc:
			queued = append(queued, r)
		drainReads:
			for {
				select {
				case r := <-n.readc:
					queued = append(queued, r)
				default:
					break drainReads
				}
			}
			startRound()
		case m := <-n.recvc:
			stepRecv(m)
		case id := <-n.transfc:
			n.rn.TransferLeader(id)
		case f := <-n.reportc:
			f(n.rn)
		case <-n.appliedc:
			releaseReads()
		case <-n.stopc:
			return
		}

		// Take in every message and proposal already waiting, so that one
		// Ready (one fsync, one apply batch) covers them all instead of one
		// Ready each.
	more:
		for range 8192 {
			select {
			case m := <-n.recvc:
				stepRecv(m)
			case p := <-n.propc:
				stepProps(p)
			default:
				break more
			}
		}

		for n.rn.HasReady() {
			rd := n.rn.Ready()
			n.stats.Readies.Add(1)
			for _, e := range rd.Entries {
				if e.GetType() != raftpb.EntryNormal && len(pendingConfs) > 0 {
					pendingConfs[0].index = e.GetIndex()
					pendingConfs[0].errc <- nil
					pendingConfs = pendingConfs[1:]
				}
			}
			if rd.SoftState != nil && rd.SoftState.RaftState != raft.StateLeader {
				// Lost leadership before they were appended: the proposer
				// retries (it checks the applied configuration anyway).
				for _, p := range pendingConfs {
					p.errc <- raft.ErrProposalDropped
				}
				pendingConfs = nil
			}
			if err := n.handleReady(&rd); err != nil {
				if d := n.store.Damage(); d != nil {
					// Damaged data: stop taking part, cleanly; the
					// storage's owner reports it and exits.
					n.log.Error("raft ready loop stopped: data damaged", "err", d)
					return
				}
				n.log.Error("raft ready loop failed; stopping node", "err", err)
				panic(fmt.Sprintf("dkv: raft ready loop: %v", err))
			}
			for _, rs := range rd.ReadStates {
				if inflight != nil && string(rs.RequestCtx) == string(inflight.id) {
					waiting = append(waiting, pendingRead{index: rs.Index, readers: inflight.readers})
					inflight = nil
				}
			}
			n.rn.Advance(rd)
			releaseReads()
			startRound()
		}
	}
}

func (n *Node[R]) handleReady(rd *raft.Ready) error {
	if rd.SoftState != nil {
		old := n.lead.Swap(rd.SoftState.Lead)
		n.isLeader.Store(rd.SoftState.RaftState == raft.StateLeader)
		if old != rd.SoftState.Lead {
			n.stats.LeaderChanges.Add(1)
			nc := make(chan struct{})
			oc := n.leaderCh.Swap(&nc)
			close(*oc)
			n.log.Info("raft leader changed", "member", fmt.Sprintf("%x", n.cfg.ID), "leader", fmt.Sprintf("%x", rd.SoftState.Lead))
		}
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		n.term.Store(rd.HardState.GetTerm())
		n.committed.Store(rd.HardState.GetCommit())
	}
	// 1. Persist before sending anything of this Ready. A snapshot
	// replaces the state: everything queued for apply goes first.
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		n.applyBarrier()
		if err := n.installSnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("install snapshot: %w", err)
		}
	}
	// 2. Send. A leader whose term and vote are already durable may send
	// before its own write finishes (raft thesis 10.2.1, as etcd does):
	// followers persist in parallel, and the entries still count toward
	// the leader's own quorum only once its write returns.
	early := n.isLeader.Load() && (rd.HardState == nil || raft.IsEmptyHardState(rd.HardState) ||
		(rd.HardState.GetTerm() == n.durableTerm && rd.HardState.GetVote() == n.durableVote))
	if early && len(rd.Messages) > 0 && n.cfg.Transport != nil {
		n.cfg.Transport.Send(rd.Messages)
	}
	persistStart := time.Now()
	if err := n.store.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
		return err
	}
	n.members.appended(rd.Entries)
	if rd.MustSync {
		n.stats.PersistSeconds.Observe(time.Since(persistStart).Seconds())
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		n.durableTerm, n.durableVote = rd.HardState.GetTerm(), rd.HardState.GetVote()
	}
	if !early && len(rd.Messages) > 0 && n.cfg.Transport != nil {
		n.cfg.Transport.Send(rd.Messages)
	}
	// 3. Apply, on the apply goroutine (raft's doc allows Advance any time
	// after persisting). Conf changes must reach the RawNode, which only
	// this goroutine may touch: a batch holding one is applied here, after
	// the queue drains, so order is kept.
	if len(rd.CommittedEntries) > 0 {
		if hasConfChange(rd.CommittedEntries) {
			n.applyBarrier()
			if err := n.applyGuarded(rd.CommittedEntries); err != nil {
				return err
			}
			return nil
		}
		n.applyc <- applyJob{ents: rd.CommittedEntries}
	}
	return nil
}

type applyJob struct {
	ents []*raftpb.Entry
	done chan struct{} // barrier: closed when everything before is applied
}

func hasConfChange(ents []*raftpb.Entry) bool {
	for _, e := range ents {
		if e.GetType() != raftpb.EntryNormal {
			return true
		}
	}
	return false
}

// applyBarrier waits until every queued batch has been applied.
func (n *Node[R]) applyBarrier() {
	done := make(chan struct{})
	n.applyc <- applyJob{done: done}
	<-done
}

// runApply applies queued batches in order until applyc is closed.
func (n *Node[R]) runApply(done chan struct{}) {
	defer close(done)
	damaged := false
	for job := range n.applyc {
		if job.done != nil {
			close(job.done)
			continue
		}
		if damaged {
			continue // never apply on top of damaged data; drain until Stop
		}
		if err := n.applyGuarded(job.ents); err != nil {
			if d := n.store.Damage(); d != nil {
				n.log.Error("apply stopped: data damaged", "err", d)
				damaged = true
				continue
			}
			n.log.Error("apply failed; stopping node", "err", err)
			panic(fmt.Sprintf("dkv: apply: %v", err))
		}
		select {
		case n.appliedc <- struct{}{}:
		default:
		}
	}
}

// applyGuarded is apply, except that a state machine's panic on a storage
// error that the storage reported as damage is returned as that error.
func (n *Node[R]) applyGuarded(ents []*raftpb.Entry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if d := n.store.Damage(); d != nil {
				err = d
				return
			}
			panic(r)
		}
	}()
	return n.apply(ents)
}

func (n *Node[R]) installSnapshot(snap *raftpb.Snapshot) error {
	// The transport has already written the sender's state under the "s"
	// prefix; it may be ahead of snap's index (it was read later), which is
	// why apply skips entries at or below the persisted applied index.
	n.cfg.StateMachine.Committing()
	if err := n.store.InstallSnapshot(snap); err != nil {
		return err
	}
	applied, err := storage.AppliedIndex(n.db)
	if err != nil {
		return err
	}
	if idx := snap.GetMetadata().GetIndex(); applied < idx {
		return fmt.Errorf("snapshot state at applied index %d is behind snapshot index %d", applied, idx)
	}
	cs, err := storage.ConfState(n.db)
	if err != nil {
		return err
	}
	n.confState.Store(cs)
	n.members.setApplied(cs)
	n.members.appliedTo(snap.GetMetadata().GetIndex())
	if err := n.cfg.StateMachine.Restored(); err != nil {
		return err
	}
	n.applied.Store(applied)
	n.notifyApplied()
	if n.cfg.ConfChanged != nil {
		n.cfg.ConfChanged()
	}
	return nil
}

func (n *Node[R]) notifyApplied() {
	nc := make(chan struct{})
	oc := n.appliedCh.Swap(&nc)
	close(*oc)
}

type applied[R any] struct {
	id  uint64
	res R
}

func (n *Node[R]) apply(ents []*raftpb.Entry) error {
	start := time.Now()
	b := n.db.NewIndexedBatch()
	defer b.Close()
	appliedIdx := n.applied.Load()
	var (
		done        []applied[R]
		results     []R
		last        uint64
		confChanged bool
	)
	for _, e := range ents {
		idx := e.GetIndex()
		if idx <= appliedIdx {
			// Already in the state (restored from a snapshot taken later
			// than its index). Conf changes must still reach raft.
			if e.GetType() != raftpb.EntryNormal {
				if err := n.applyConfChange(nil, e); err != nil {
					return err
				}
			}
			continue
		}
		last = idx
		switch e.GetType() {
		case raftpb.EntryNormal:
			if len(e.GetData()) == 0 {
				continue // leader's empty entry at the start of its term
			}
			id, res := n.cfg.StateMachine.Apply(b, idx, e.GetData())
			if id != 0 {
				done = append(done, applied[R]{id: id, res: res})
			}
			results = append(results, res)
		case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
			if err := n.applyConfChange(b, e); err != nil {
				return err
			}
			confChanged = true
		}
	}
	if last == 0 {
		return nil
	}
	if err := storage.SetAppliedIndex(b, last); err != nil {
		return err
	}
	// Not synced: the raft log is, and a restart re-applies from the
	// durable applied index.
	n.cfg.StateMachine.Committing()
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("commit applied batch: %w", err)
	}
	n.stats.AppliedBatch.Add(1)
	n.stats.ApplySeconds.Observe(time.Since(start).Seconds())
	n.applied.Store(last)
	n.members.appliedTo(last)
	n.cfg.StateMachine.Committed(last, results)
	n.mu.Lock()
	for _, d := range done {
		if ch, ok := n.waiters[d.id]; ok {
			// Never block the raft loop on a caller: each waiter gets
			// one result and is then forgotten.
			delete(n.waiters, d.id)
			select {
			case ch <- d.res:
			default:
			}
		}
	}
	n.mu.Unlock()
	n.notifyApplied()
	if confChanged && n.cfg.ConfChanged != nil {
		n.cfg.ConfChanged()
	}
	return n.maybeCompactLog(last)
}

// applyConfChange hands a committed conf change to raft and, with a batch,
// records the new ConfState and member table in it.
func (n *Node[R]) applyConfChange(b *pebble.Batch, e *raftpb.Entry) error {
	var cc raftpb.ConfChangeI
	var ctxData []byte
	if e.GetType() == raftpb.EntryConfChange {
		c := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return err
		}
		cc, ctxData = c, c.GetContext()
	} else {
		c := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return err
		}
		cc, ctxData = c, c.GetContext()
	}
	cs := n.rn.ApplyConfChange(cc)
	n.confState.Store(cs)
	n.members.setApplied(cs)
	if b == nil {
		return nil
	}
	if err := storage.SetConfState(b, cs); err != nil {
		return err
	}
	if err := n.cfg.StateMachine.ApplyConfChange(b, cc.AsV2(), ctxData); err != nil {
		return err
	}
	return nil
}

// errConfChangePending is returned when raft refuses a conf change because
// an earlier one is not applied yet; the proposer retries.
var errConfChangePending = errors.New("another membership change is still being applied")

// stepConfChange proposes p.cc the way RawNode.ProposeConfChange does, but
// keeps the message's entries: raft replaces the entry with an empty normal
// one when it refuses the change.
func (n *Node[R]) stepConfChange(p *confProposal) error {
	typ, data, err := raftpb.MarshalConfChange(p.cc)
	if err != nil {
		return err
	}
	ents := []*raftpb.Entry{{Type: typ.Enum(), Data: data}}
	if err := n.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(n.cfg.ID), Entries: ents}); err != nil {
		return err
	}
	if ents[0].GetType() == raftpb.EntryNormal {
		return errConfChangePending
	}
	return nil
}

func (n *Node[R]) maybeCompactLog(applied uint64) error {
	first, err := n.store.FirstIndex()
	if err != nil {
		return err
	}
	if applied < first || applied-first < n.cfg.SnapshotCount+n.cfg.CatchUpEntries {
		return nil
	}
	compactTo := applied - n.cfg.CatchUpEntries
	return n.store.CompactLog(applied, compactTo, n.confState.Load())
}
