package server

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/state"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// stateMachine adapts the mvcc store to raftnode.StateMachine.
type stateMachine struct {
	s         *Server
	compacted bool // a compaction was applied in the current batch
}

func (m *stateMachine) Apply(b *pebble.Batch, index uint64, data []byte) (uint64, mvcc.Result) {
	req := &dkvpb.InternalRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		// Every replica sees the same bytes and skips the same entry, so
		// state stays identical.
		m.s.log.Error("undecodable raft entry skipped", "index", index, "err", err)
		return 0, mvcc.Result{}
	}
	return req.GetId(), m.apply(b, req)
}

func (m *stateMachine) ApplyConfChange(b *pebble.Batch, cc *raftpb.ConfChangeV2, ctx []byte) error {
	return state.ApplyMembership(b, cc, ctx)
}

func (m *stateMachine) apply(b *pebble.Batch, req *dkvpb.InternalRequest) mvcc.Result {
	if ma := req.GetMemberAttrs(); ma != nil {
		if err := state.SetMemberClientURL(b, ma.GetId(), ma.GetClientUrl()); err != nil {
			panic(err)
		}
		return mvcc.Result{}
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
func (m *stateMachine) Committed(index uint64, results []mvcc.Result) {
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
