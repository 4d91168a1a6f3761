package raftnode

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/storage"
	"go.etcd.io/raft/v3/raftpb"
)

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
	n.logSize.reset()
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

func (n *Node[R]) apply(ents []*raftpb.Entry) error {
	start := time.Now()
	b := n.db.NewIndexedBatch()
	defer b.Close()
	appliedIdx := n.applied.Load()
	var (
		// Sized once: R is a large struct, and these two slices,
		// grown by appending, were 18% of the bytes a follower
		// allocated under puts.
		done        = make([]applied[R], 0, len(ents))
		results     = make([]R, 0, len(ents))
		last        uint64
		bytes       uint64
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
		bytes += uint64(len(e.GetData()))
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
	n.logSize.applied(last, bytes)
	n.stats.AppliedBatch.Add(1)
	n.stats.ApplySeconds.Observe(time.Since(start).Seconds())
	n.stats.ApplyEntries.Observe(float64(len(ents)))
	n.applied.Store(last)
	n.members.appliedTo(last)
	n.cfg.StateMachine.Committed(last, results)
	n.waiters.deliver(done)
	n.notifyApplied()
	if confChanged && n.cfg.ConfChanged != nil {
		n.cfg.ConfChanged()
	}
	return n.maybeCompactLog(last)
}

func (n *Node[R]) maybeCompactLog(applied uint64) error {
	first, err := n.store.FirstIndex()
	if err != nil {
		return err
	}
	if applied < first {
		return nil
	}
	// The log may have been truncated elsewhere (Storage.CompactLog
	// under a NOSPACE alarm): what went is no longer counted.
	n.logSize.compacted(first - 1)
	byCount := applied-first >= n.cfg.SnapshotCount+n.cfg.CatchUpEntries
	byBytes := n.logSize.since() > n.cfg.LogBytes
	if !byCount && !byBytes {
		return nil
	}
	compactTo := applied - min(applied, n.cfg.CatchUpEntries)
	if byBytes {
		compactTo = max(compactTo, n.logSize.keepAtMost(n.cfg.LogBytes/4))
	}
	if compactTo < first {
		return nil
	}
	if err := n.store.CompactLog(applied, compactTo, n.confState.Load()); err != nil {
		return err
	}
	n.logSize.compacted(compactTo)
	return nil
}

// logSize counts the bytes of applied entries since the last log
// compaction, per apply batch, so that the log can be bounded by size.
// Entries in the log before a restart are not counted: after one the log
// may hold up to twice the bound until its next compaction.
type logSize struct {
	total uint64    // bytes applied since start
	base  uint64    // total at the last compaction
	marks []logMark // per batch since then, oldest first
}

type logMark struct{ index, total uint64 }

// applied records a batch ending at index with bytes of entry data.
func (l *logSize) applied(index, bytes uint64) {
	l.total += bytes
	l.marks = append(l.marks, logMark{index, l.total})
}

// since is the bytes applied since the last compaction.
func (l *logSize) since() uint64 { return l.total - l.base }

// keepAtMost is the lowest index to compact to so that the entries kept
// above it hold at most tail bytes, at the granularity of apply batches.
func (l *logSize) keepAtMost(tail uint64) uint64 {
	for _, m := range l.marks {
		if l.total-m.total <= tail {
			return m.index
		}
	}
	return 0
}

// compacted drops the marks at or below index, the log's new start.
func (l *logSize) compacted(index uint64) {
	i := 0
	for i < len(l.marks) && l.marks[i].index <= index {
		l.base = l.marks[i].total
		i++
	}
	l.marks = append(l.marks[:0], l.marks[i:]...)
}

// reset forgets what was counted: a snapshot replaced the log.
func (l *logSize) reset() {
	l.base = l.total
	l.marks = l.marks[:0]
}
