package state

import (
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storage"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Result is the outcome of applying one command, delivered to the member
// that proposed it and, in Committed, to the Executor.
type Result struct {
	// Resp is the command's response (*dkvpb.PutResponse, ...), its header
	// carrying the revision; nil when Err is set and for the commands
	// without a response (member attributes, alarms).
	Resp proto.Message
	// Err is the refusal (a *dkverr.Error), nil on success. A txn whose
	// compares failed is a success with Succeeded=false.
	Err error
	// Revision is the store revision after the command.
	Revision int64
	// Effects are what the command asks of the rest of the member.
	Effects Effects
}

// Effects are a command's side effects outside the batch, for the
// Executor. Empty for a refused command.
type Effects struct {
	// Events are the key changes, in the order they were made, for the
	// watch hub once committed.
	Events []mvcc.Event
	// Leases are the lease changes (grants, renewals, checkpoints,
	// revocations), for the lessor at apply time.
	Leases []lease.Change
	// Locks are the lock grants made (to the acquirer or to a waiter on a
	// release), to wake the waiters they went to once committed.
	Locks []*dkvpb.LockHandle
	// Purge is set by an applied compaction: the history below the new
	// compact revision may be purged once the compaction is committed.
	Purge bool
}

// Executor carries out effects; the server implements it. Its methods run
// on the apply goroutine and must not block for long.
type Executor interface {
	// LeasesChanged is called as soon as a command changing leases is
	// applied, before its batch is committed: the time a member learns of
	// a lease change is what its lessor counts from.
	LeasesChanged(changes []lease.Change)
	// Committed is called once the batch holding results is committed,
	// with their results in log order.
	Committed(results []Result)
	// Restored is called after a snapshot replaced the state and the
	// machine reloaded its own view of it.
	Restored() error
}

// Machine is the state machine. Apply, ApplyConfChange, Committing,
// Committed and Restored run on raftnode's apply goroutine.
type Machine struct {
	kv     *mvcc.Store
	store  *storage.Storage
	exec   Executor
	log    *slog.Logger
	alarms Alarms
	auth   Auth
	quota  storeQuota
	floor  queueFloor // the job queue's scan hint (queuefloor.go)
	// sessions caches client session records (session.go).
	sessions map[uint64]*dkvpb.SessionRecord
}

// New returns the machine over kv and the applied state in store, and
// loads the alarm table from it.
func New(kv *mvcc.Store, store *storage.Storage, exec Executor, log *slog.Logger) (*Machine, error) {
	m := &Machine{kv: kv, store: store, exec: exec, log: log}
	kv.SetQuota(&m.quota)
	kv.SetObserver(&m.floor)
	if err := m.alarms.load(store.DB()); err != nil {
		return nil, err
	}
	if err := m.auth.load(store.DB()); err != nil {
		return nil, err
	}
	return m, nil
}

// Alarms is the replicated alarm table.
func (m *Machine) Alarms() *Alarms { return &m.alarms }

// Auth is the replicated auth state.
func (m *Machine) Auth() *Auth { return &m.auth }

// Apply decodes and applies one committed entry.
func (m *Machine) Apply(b *pebble.Batch, index uint64, data []byte) (uint64, Result) {
	req := &dkvpb.InternalRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		// Every replica sees the same bytes and skips the same entry, so
		// state stays identical.
		m.log.Error("undecodable raft entry skipped", "index", index, "err", err)
		return 0, Result{}
	}
	res := m.applyCommand(b, req)
	if len(res.Effects.Leases) > 0 {
		m.exec.LeasesChanged(res.Effects.Leases)
	}
	return req.GetId(), res
}

// applyCommand applies one command: at most once if it carries a client
// session (session.go), else as it is.
func (m *Machine) applyCommand(b *pebble.Batch, req *dkvpb.InternalRequest) Result {
	if req.GetSession() != nil {
		return m.applyInSession(b, req)
	}
	return m.apply(b, req)
}

// apply applies one command through its row in the registry (command.go).
func (m *Machine) apply(b *pebble.Batch, req *dkvpb.InternalRequest) Result {
	c, _ := Lookup(req)
	if c.GrowsData(req) {
		// Decided by replicated state only, so every member refuses alike.
		if why := m.alarms.Describe(); why != "" {
			return m.refused(NoSpaceError(why))
		}
	}
	if err := c.Validate(req, applyLimits); err != nil {
		return m.refused(err) // an empty or unknown command too
	}
	if c.checked {
		if err := m.auth.checkFresh(req); err != nil {
			return m.refused(err)
		}
	}
	m.quota.reset(b)
	w := m.kv.Begin(b)
	w.SetTime(req.GetTimeUnixNano())
	w.SetCaller(req.GetUser(), m.auth.rootTest())
	if c.apply != nil {
		return c.apply(m, b, req)
	}
	resp, err := c.write(m, w, req)
	if err != nil {
		return m.refused(err)
	}
	rev, ch := w.Finish()
	countStores(b, ch.Events) // stores.go
	mvcc.StampRevision(resp, rev)
	return Result{Resp: resp, Revision: rev, Effects: Effects{
		Events: ch.Events, Leases: ch.Leases, Locks: ch.Locks, Purge: c.purges,
	}}
}

func (m *Machine) refused(err error) Result {
	return Result{Err: err, Revision: m.kv.Revision()}
}

// applyAlarm records what a member measured: deterministic, since the
// measurement travels in the command.
func (m *Machine) applyAlarm(b *pebble.Batch, ar *dkvpb.AlarmRequest) {
	switch ar.GetAlarm() {
	case dkvpb.AlarmType_ALARM_TYPE_NONE, dkvpb.AlarmType_ALARM_TYPE_NOSPACE:
	case dkvpb.AlarmType_ALARM_TYPE_CORRUPT:
		kind := byte(ar.GetAlarm())
		if ar.GetActive() {
			must(setKindAlarm(b, ar.GetMemberId(), kind, ar.GetReason()))
		} else {
			must(deleteKindAlarm(b, ar.GetMemberId(), kind))
		}
		m.alarms.setCorrupt(ar.GetMemberId(), ar.GetReason(), ar.GetActive())
		return
	default:
		// A kind this build does not know: every member of this build
		// skips it alike.
		m.log.Warn("alarm of an unknown kind skipped", "kind", ar.GetAlarm())
		return
	}
	if ar.GetActive() {
		must(setAlarm(b, ar.GetMemberId(), ar.GetReason()))
	} else {
		must(deleteAlarm(b, ar.GetMemberId()))
	}
	m.alarms.set(ar.GetMemberId(), ar.GetReason(), ar.GetActive())
}

// ApplyConfChange mirrors a conf change into the member table.
func (m *Machine) ApplyConfChange(b *pebble.Batch, cc *raftpb.ConfChangeV2, ctx []byte) error {
	return ApplyMembership(b, cc, ctx)
}

// Committing opens the store's commit window (see mvcc.Store.BeginCommit).
func (m *Machine) Committing() { m.kv.BeginCommit() }

// Committed closes the commit window and hands the batch's results to the
// executor.
func (m *Machine) Committed(index uint64, results []Result) {
	m.kv.EndCommit()
	m.exec.Committed(results)
}

// Restored reloads the machine's view of a state a snapshot replaced.
func (m *Machine) Restored() error {
	m.sessions = nil
	db := m.store.DB()
	if err := m.kv.Reload(db); err != nil {
		return err
	}
	if err := m.alarms.load(db); err != nil {
		return err
	}
	if err := m.auth.load(db); err != nil {
		return err
	}
	return m.exec.Restored()
}

func must(err error) {
	if err != nil {
		panic(fmt.Sprintf("state: storage failure during apply: %v", err))
	}
}
