package state

import (
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/ratelimit"
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
}

// New returns the machine over kv and the applied state in store, and
// loads the alarm table from it.
func New(kv *mvcc.Store, store *storage.Storage, exec Executor, log *slog.Logger) (*Machine, error) {
	m := &Machine{kv: kv, store: store, exec: exec, log: log}
	kv.SetQuota(&m.quota)
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
	res := m.apply(b, req)
	if len(res.Effects.Leases) > 0 {
		m.exec.LeasesChanged(res.Effects.Leases)
	}
	return req.GetId(), res
}

// apply is the one dispatch of every command.
func (m *Machine) apply(b *pebble.Batch, req *dkvpb.InternalRequest) Result {
	if GrowsData(req) {
		// Decided by replicated state only, so every member refuses alike.
		if why := m.alarms.Describe(); why != "" {
			return m.refused(NoSpaceError(why))
		}
	}
	if err := validate(req); err != nil {
		return m.refused(err)
	}
	if err := m.auth.checkFresh(req); err != nil {
		return m.refused(err)
	}
	m.quota.reset(b)
	w := m.kv.Begin(b)
	w.SetTime(req.GetTimeUnixNano())
	w.SetCaller(req.GetUser(), m.auth.rootTest())
	var (
		resp  proto.Message
		err   error
		purge bool
	)
	switch r := req.Request.(type) {
	case *dkvpb.InternalRequest_Put:
		resp, err = w.Put(r.Put)
	case *dkvpb.InternalRequest_DeleteRange:
		resp, err = w.DeleteRange(r.DeleteRange)
	case *dkvpb.InternalRequest_Txn:
		resp, err = w.Txn(r.Txn)
	case *dkvpb.InternalRequest_Counter:
		resp, err = w.Counter(r.Counter)
	case *dkvpb.InternalRequest_Compact:
		resp, err = w.Compact(r.Compact)
		purge = err == nil
	case *dkvpb.InternalRequest_LeaseGrant:
		resp, err = w.LeaseGrant(r.LeaseGrant)
	case *dkvpb.InternalRequest_LeaseRevoke:
		resp, err = w.LeaseRevoke(r.LeaseRevoke.GetId())
	case *dkvpb.InternalRequest_LeaseRenew:
		resp = w.LeaseRenew(r.LeaseRenew)
	case *dkvpb.InternalRequest_LeaseCheckpoint:
		resp = w.LeaseCheckpoint(r.LeaseCheckpoint)
	case *dkvpb.InternalRequest_LeaseExpire:
		resp = w.LeaseExpire(r.LeaseExpire)
	case *dkvpb.InternalRequest_LockAcquire:
		resp, err = w.LockAcquire(r.LockAcquire)
	case *dkvpb.InternalRequest_LockRelease:
		resp = w.LockRelease(r.LockRelease.GetHandle())
	case *dkvpb.InternalRequest_LockCancel:
		resp = w.LockCancel(r.LockCancel)
	case *dkvpb.InternalRequest_QueueClaim:
		// Run-at is compared with the entry's time, never this member's
		// clock, so every member claims the same job.
		qc := w.QueueClaim(r.QueueClaim, req.GetTimeUnixNano()/1e6)
		qc.ClaimedUnixNano = req.GetTimeUnixNano()
		resp = qc
	case *dkvpb.InternalRequest_QueueAck:
		resp, err = w.QueueAck(r.QueueAck)
	case *dkvpb.InternalRequest_QueueAckBatch:
		resp = w.QueueAckBatch(r.QueueAckBatch)
	case *dkvpb.InternalRequest_IndexCreate:
		resp, err = w.IndexCreate(r.IndexCreate)
	case *dkvpb.InternalRequest_IndexDrop:
		resp, err = w.IndexDrop(r.IndexDrop)
	case *dkvpb.InternalRequest_MemberAttrs:
		must(SetMemberAttrs(b, r.MemberAttrs.GetId(), r.MemberAttrs.GetClientUrl(), r.MemberAttrs.GetVersion()))
		return Result{}
	case *dkvpb.InternalRequest_Alarm:
		m.applyAlarm(b, r.Alarm)
		return Result{Revision: m.kv.Revision()}
	case *dkvpb.InternalRequest_RateLimit:
		// Outside the MVCC keyspace: a decision is no key change, so it
		// takes no revision and sends no watch event. Its time is the
		// entry's, never this member's clock.
		rl, err := ratelimit.Apply(b, r.RateLimit, req.GetTimeUnixNano())
		must(err)
		rl.Header = &dkvpb.ResponseHeader{Revision: m.kv.Revision()}
		return Result{Resp: rl, Revision: m.kv.Revision()}
	case *dkvpb.InternalRequest_Auth:
		arev, err := m.auth.apply(b, r.Auth)
		if err != nil {
			return m.refused(err)
		}
		return Result{Resp: &dkvpb.AuthResponse{Header: &dkvpb.ResponseHeader{}, AuthRevision: arev}, Revision: m.kv.Revision()}
	case *dkvpb.InternalRequest_StoreCreate:
		return m.applyStoreCreate(b, r.StoreCreate) // stores.go
	case *dkvpb.InternalRequest_StoreDelete:
		return m.applyStoreDelete(b, r.StoreDelete)
	default:
		// validate refuses these first; kept so a new command cannot
		// silently apply as nothing.
		err = dkverr.New(dkverr.InvalidInput, "unknown command %T", req.Request)
	}
	if err != nil {
		return m.refused(err)
	}
	rev, ch := w.Finish()
	countStores(b, ch.Events) // stores.go
	mvcc.StampRevision(resp, rev)
	return Result{Resp: resp, Revision: rev, Effects: Effects{
		Events: ch.Events, Leases: ch.Leases, Locks: ch.Locks, Purge: purge,
	}}
}

func (m *Machine) refused(err error) Result {
	return Result{Err: err, Revision: m.kv.Revision()}
}

// validate checks a command's structure at apply time. Member attributes
// and alarms come only from members, never from a client.
func validate(req *dkvpb.InternalRequest) error {
	if req.GetMemberAttrs() != nil || req.GetAlarm() != nil || req.GetAuth() != nil ||
		req.GetStoreCreate() != nil || req.GetStoreDelete() != nil {
		return nil
	}
	return mvcc.ValidateApplied(req)
}

// applyAlarm records what a member measured: deterministic, since the
// measurement travels in the command.
func (m *Machine) applyAlarm(b *pebble.Batch, ar *dkvpb.AlarmRequest) {
	switch ar.GetAlarm() {
	case dkvpb.AlarmType_ALARM_TYPE_NONE, dkvpb.AlarmType_ALARM_TYPE_NOSPACE:
	case dkvpb.AlarmType_ALARM_TYPE_CORRUPT:
		kind := byte(ar.GetAlarm())
		if ar.GetActive() {
			must(storage.SetKindAlarm(b, ar.GetMemberId(), kind, ar.GetReason()))
		} else {
			must(storage.DeleteKindAlarm(b, ar.GetMemberId(), kind))
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
		must(storage.SetAlarm(b, ar.GetMemberId(), ar.GetReason()))
	} else {
		must(storage.DeleteAlarm(b, ar.GetMemberId()))
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
