package server

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/raftnode"
)

// stateMachine adapts the mvcc store to raftnode.StateMachine.
type stateMachine struct {
	s         *Server
	compacted bool // a compaction was applied in the current batch
}

func (m *stateMachine) Apply(b *pebble.Batch, index uint64, req *dkvpb.InternalRequest) any {
	if ma := req.GetMemberAttrs(); ma != nil {
		if err := raftnode.SetMemberClientURL(b, ma.GetId(), ma.GetClientUrl()); err != nil {
			panic(err)
		}
		return nil
	}
	if ar := req.GetAlarm(); ar != nil {
		return m.s.applyAlarm(b, ar)
	}
	if growsData(req) {
		// Decided by replicated state only, so every member refuses alike.
		if why := m.s.alarms.describe(); why != "" {
			return mvcc.Result{Err: noSpaceErr(why), Revision: m.s.kv.Revision()}
		}
	}
	res := m.s.kv.Apply(b, req)
	if len(res.Leases) > 0 {
		// The time this member learns of a lease change is what its
		// lessor counts from (lease.Lessor.Promote).
		m.s.lessor.Apply(res.Leases)
	}
	if req.GetCompact() != nil && res.Err == nil {
		m.compacted = true
	}
	return res
}

func (m *stateMachine) Committing() { m.s.kv.BeginCommit() }

// Committed kicks the history purge only once the compaction is durable in
// the state, so a purge never races a batch that still allows older reads.
func (m *stateMachine) Committed(index uint64, results []any) {
	m.s.kv.EndCommit()
	if m.compacted {
		m.compacted = false
		select {
		case m.s.purgeKick <- struct{}{}:
		default:
		}
	}
	// Hand the events to the watch hub; it fans out on its own goroutine.
	m.s.publishWatch(results)
	// Wake Acquire calls whose grant is now applied and durable.
	m.s.lockWait.notify(results)
}

func (m *stateMachine) Restored() error {
	if err := m.s.kv.Reload(m.s.store.DB()); err != nil {
		return err
	}
	if err := m.s.loadLeases(); err != nil {
		return err
	}
	if err := m.s.loadAlarms(); err != nil {
		return err
	}
	// The state jumped: watchers replay the skipped revisions from history.
	if m.s.watchHub != nil {
		m.s.watchHub.Reset(m.s.kv.Revision())
	}
	return nil
}
