package raftnode

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// loop is the raft loop's own state; only run's goroutine touches it.
type loop struct {
	reads readBatcher
	confs confTracker
	perrs []chan error // reused: the errc of each proposal in one MsgProp

	// Group commit (see gather).
	stepped     int           // proposals stepped since the last Ready
	lastPersist time.Duration // how long the last synced write took
	gatherT     *time.Timer
}

// Bounds of the leader's group commit wait.
const (
	gatherMax      = 1500 * time.Microsecond
	gatherGap      = 200 * time.Microsecond
	gatherMinBatch = 2 // proposals in one wake-up that show concurrency
)

// gather is the leader's group commit. When proposals arrive faster than
// synced writes complete (at least gatherMinBatch came in during the last
// one), it waits for more before persisting, so one fsync covers them: on
// a disk whose fsyncs are the bottleneck that is fewer fsyncs per put. It
// stops once no proposal came for gatherGap, and at most after as long as
// the last synced write took (at most gatherMax). A lone client never has
// two proposals waiting, so its latency does not grow.
func (n *Node[R]) gather(l *loop) {
	if l.stepped < gatherMinBatch || !n.isLeader.Load() || l.lastPersist <= 0 {
		return
	}
	deadline := time.Now().Add(min(l.lastPersist, gatherMax))
	if l.gatherT == nil {
		l.gatherT = time.NewTimer(gatherGap)
	} else {
		l.gatherT.Reset(gatherGap)
	}
	for {
		select {
		case p := <-n.propc:
			n.stepProps(l, p)
			left := time.Until(deadline)
			if left <= 0 {
				l.gatherT.Stop()
				return
			}
			l.gatherT.Reset(min(gatherGap, left))
		case m := <-n.recvc:
			n.stepRecv(m)
		case <-l.gatherT.C:
			return
		}
	}
}

func (n *Node[R]) run() {
	applyDone := make(chan struct{})
	go n.runApply(applyDone)
	defer func() {
		close(n.applyc)
		<-applyDone
		close(n.donec)
	}()
	ticks := n.cfg.Ticks
	if ticks == nil {
		ticker := time.NewTicker(n.cfg.TickInterval)
		defer ticker.Stop()
		ticks = ticker.C
	}
	l := &n.loop

	// What raft has at start (a bootstrap's conf changes, a restart's
	// unapplied entries) is handled now rather than at the first tick.
	if !n.handleReadies(l) {
		return
	}
	if n.soleVoter() {
		// The only voter need not wait an election timeout to learn that
		// nobody else leads: campaign at once (raft refuses to while the
		// configuration's entries are unapplied; they are, now).
		if err := n.rn.Campaign(); err != nil {
			n.log.Debug("raft campaign", "err", err)
		}
		if !n.handleReadies(l) {
			return
		}
	}

	var woke time.Time // when a wake-up that steps raft began
	for {
		select {
		case <-ticks:
			woke = time.Now()
			n.rn.Tick()
			l.reads.tick()
			n.startRead(l)
		case p := <-n.propc:
			woke = time.Now()
			n.stepProps(l, p)
		case p := <-n.confc:
			woke = time.Now()
			err := n.stepConfChange(p)
			if err == nil && n.rn.BasicStatus().RaftState == raft.StateLeader {
				// Answered when the entry shows up in a Ready, with its
				// index.
				l.confs.add(p)
			} else {
				p.errc <- err
			}
			if n.hooks != nil && n.hooks.confStepped != nil {
				n.hooks.confStepped()
			}
		case r := <-n.readc:
			woke = time.Now()
			l.reads.add(r)
		drainReads:
			for {
				select {
				case r := <-n.readc:
					l.reads.add(r)
				default:
					break drainReads
				}
			}
			n.startRead(l)
		case m := <-n.recvc:
			woke = time.Now()
			n.stepRecv(m)
		case id := <-n.transfc:
			n.rn.TransferLeader(id)
		case f := <-n.reportc:
			f(n.rn)
		case <-n.appliedc:
			l.reads.release(n.applied.Load())
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
				n.stepRecv(m)
			case p := <-n.propc:
				n.stepProps(l, p)
			default:
				break more
			}
		}
		n.gather(l)
		if !woke.IsZero() {
			n.stats.StepSeconds.Observe(time.Since(woke).Seconds())
			woke = time.Time{}
		}

		if !n.handleReadies(l) {
			return
		}
	}
}

// soleVoter reports whether this member is the only voter of raft's
// configuration (learners aside).
func (n *Node[R]) soleVoter() bool {
	cfg := n.rn.Status().Config
	in, out := cfg.Voters[0], cfg.Voters[1]
	if len(out) != 0 || len(in) != 1 {
		return false
	}
	_, ok := in[n.cfg.ID]
	return ok
}

// handleReadies handles every Ready raft has; false means the loop must
// stop (damaged data).
func (n *Node[R]) handleReadies(l *loop) bool {
	for n.rn.HasReady() {
		rd := n.rn.Ready()
		n.stats.Readies.Add(1)
		l.stepped = 0
		l.confs.appended(rd.Entries)
		l.confs.softState(rd.SoftState)
		if err := n.handleReady(&rd); err != nil {
			if d := n.store.Damage(); d != nil {
				// Damaged data: stop taking part, cleanly; the
				// storage's owner reports it and exits.
				n.log.Error("raft ready loop stopped: data damaged", "err", d)
				return false
			}
			n.log.Error("raft ready loop failed; stopping node", "err", err)
			panic(fmt.Sprintf("dkv: raft ready loop: %v", err))
		}
		l.reads.answered(rd.ReadStates)
		n.rn.Advance(rd)
		l.reads.release(n.applied.Load())
		n.startRead(l)
	}
	return true
}

// stepProps hands raft every proposal waiting now as one MsgProp.
func (n *Node[R]) stepProps(l *loop, p *proposal) {
	// A fresh slice each time: on a follower raft forwards these
	// entries to the leader in a message the transport encodes
	// later, so the backing array must not be reused.
	props := make([]*raftpb.Entry, 0, 1+len(n.propc))
	perrs := l.perrs[:0]
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
	l.stepped += len(props)
	err := n.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(n.cfg.ID), Entries: props})
	for _, c := range perrs {
		c <- err
	}
	clear(perrs) // drop the references until the next batch
	l.perrs = perrs
}

func (n *Node[R]) stepRecv(m *raftpb.Message) {
	if n.checkAppend(m) || n.checkAck(m) {
		return
	}
	if err := n.rn.Step(m); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
		n.log.Debug("raft step", "type", m.GetType(), "err", err)
	}
}

// startRead starts a ReadIndex round for the queued readers, unless one
// is in flight.
func (n *Node[R]) startRead(l *loop) {
	if l.reads.due() {
		n.stats.ReadRounds.Add(1)
		n.rn.ReadIndex(l.reads.start(n.NextID()))
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
			n.log.Info("raft leader changed", "id", fmt.Sprintf("%x", n.cfg.ID), "leader", fmt.Sprintf("%x", rd.SoftState.Lead))
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
		n.send(rd.Messages)
	}
	if n.hooks != nil && n.hooks.persist != nil {
		n.hooks.persist(rd)
	}
	persistStart := time.Now()
	if err := n.store.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
		return err
	}
	n.members.appended(rd.Entries)
	if rd.MustSync {
		n.loop.lastPersist = time.Since(persistStart)
		n.stats.PersistSeconds.Observe(n.loop.lastPersist.Seconds())
		n.stats.SyncEntries.Observe(float64(len(rd.Entries)))
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		n.durableTerm, n.durableVote = rd.HardState.GetTerm(), rd.HardState.GetVote()
	}
	if !early && len(rd.Messages) > 0 && n.cfg.Transport != nil {
		n.send(rd.Messages)
	}
	// 3. Apply, on the apply goroutine (raft's doc allows Advance any time
	// after persisting). Conf changes must reach the RawNode, which only
	// this goroutine may touch: a batch holding one is applied here, after
	// the queue drains, so order is kept.
	if len(rd.CommittedEntries) > 0 {
		handoff := time.Now()
		if hasConfChange(rd.CommittedEntries) {
			n.applyBarrier()
			if err := n.applyGuarded(rd.CommittedEntries); err != nil {
				return err
			}
		} else {
			n.applyc <- applyJob{ents: rd.CommittedEntries}
		}
		n.stats.HandoffSeconds.Observe(time.Since(handoff).Seconds())
	}
	return nil
}

// send hands msgs to the transport.
func (n *Node[R]) send(msgs []*raftpb.Message) {
	start := time.Now()
	n.cfg.Transport.Send(msgs)
	n.stats.SendSeconds.Observe(time.Since(start).Seconds())
}
