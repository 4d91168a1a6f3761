package state

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The command registry. Every replicated command kind (a field of
// InternalRequest's oneof) has one Command row, declared beside its logic
// (kv.go, lease.go, lock.go, queue.go, ratelimit.go, auth.go, members.go,
// alarms.go, stores.go). A row says everything the rest of DKV asks about
// a command: how it is validated, what a client needs to make it, whether
// the NOSPACE alarm refuses it, and how it applies. Lookup holds the only
// switch over command kinds; TestEveryCommandHasARow fails for a oneof
// field without a row. Adding a command is one proto field, one row and
// one handler line.

// Command is one replicated command kind. The zero of each optional
// function is the conservative answer: nothing to validate, the root role
// needed, no data added.
type Command struct {
	// name is the command's field in InternalRequest's oneof.
	name string
	// validate checks the command's structure against the limits: before
	// proposing with the configured ones, and at apply with applyLimits.
	// nil: nothing to check (members' own commands, and the stores, whose
	// names and quotas apply checks).
	validate func(req *dkvpb.InternalRequest, l mvcc.Limits) error
	// checked marks a command a client asked for whose permissions the
	// proposing member checked: it carries the auth revision it was
	// checked against and applies only at that revision (Auth.checkFresh).
	// The others are members' bookkeeping, auth changes (which the Auth
	// service checks itself) and the recipes' commands, which the server's
	// interceptor checks as they come in.
	checked bool
	// needs is what a client's request for the command (the oneof's
	// message, as the client sent it) needs; st is the member's applied
	// state, for needs that depend on it. nil: the root role.
	needs func(msg proto.Message, st LocalState) ([]Need, error)
	// growsData reports whether the command can add data, and so is
	// refused while a NOSPACE alarm is raised. nil: never (deletes,
	// compaction, and lease and lock bookkeeping that frees or keeps
	// space).
	growsData func(req *dkvpb.InternalRequest) bool
	// write applies a command on the MVCC keyspace through w; the
	// machine finishes the revision. Exactly one of write and apply is
	// set.
	write func(m *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error)
	// apply applies a command outside the MVCC keyspace (no revision of
	// its own) and returns its whole result.
	apply func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result
	// purges marks compaction: once applied and committed, the history
	// below the new compact revision may be purged.
	purges bool
}

// Lookup returns the row of req's command and the message the command
// carries; nil for a request with no command or one this build does not
// know. It is the one switch over command kinds.
func Lookup(req *dkvpb.InternalRequest) (*Command, proto.Message) {
	switch r := req.GetRequest().(type) {
	case *dkvpb.InternalRequest_Put:
		return &putCommand, r.Put
	case *dkvpb.InternalRequest_DeleteRange:
		return &deleteRangeCommand, r.DeleteRange
	case *dkvpb.InternalRequest_Txn:
		return &txnCommand, r.Txn
	case *dkvpb.InternalRequest_Counter:
		return &counterCommand, r.Counter
	case *dkvpb.InternalRequest_Compact:
		return &compactCommand, r.Compact
	case *dkvpb.InternalRequest_MemberAttrs:
		return &memberAttrsCommand, r.MemberAttrs
	case *dkvpb.InternalRequest_LeaseGrant:
		return &leaseGrantCommand, r.LeaseGrant
	case *dkvpb.InternalRequest_LeaseRevoke:
		return &leaseRevokeCommand, r.LeaseRevoke
	case *dkvpb.InternalRequest_LeaseRenew:
		return &leaseRenewCommand, r.LeaseRenew
	case *dkvpb.InternalRequest_LeaseCheckpoint:
		return &leaseCheckpointCommand, r.LeaseCheckpoint
	case *dkvpb.InternalRequest_LeaseExpire:
		return &leaseExpireCommand, r.LeaseExpire
	case *dkvpb.InternalRequest_LockAcquire:
		return &lockAcquireCommand, r.LockAcquire
	case *dkvpb.InternalRequest_LockRelease:
		return &lockReleaseCommand, r.LockRelease
	case *dkvpb.InternalRequest_LockCancel:
		return &lockCancelCommand, r.LockCancel
	case *dkvpb.InternalRequest_Alarm:
		return &alarmCommand, r.Alarm
	case *dkvpb.InternalRequest_RateLimit:
		return &rateLimitCommand, r.RateLimit
	case *dkvpb.InternalRequest_QueueClaim:
		return &queueClaimCommand, r.QueueClaim
	case *dkvpb.InternalRequest_QueueAck:
		return &queueAckCommand, r.QueueAck
	case *dkvpb.InternalRequest_QueueAckBatch:
		return &queueAckBatchCommand, r.QueueAckBatch
	case *dkvpb.InternalRequest_Auth:
		return &authCommand, r.Auth
	case *dkvpb.InternalRequest_StoreCreate:
		return &storeCreateCommand, r.StoreCreate
	case *dkvpb.InternalRequest_StoreDelete:
		return &storeDeleteCommand, r.StoreDelete
	case *dkvpb.InternalRequest_IndexCreate:
		return &indexCreateCommand, r.IndexCreate
	case *dkvpb.InternalRequest_IndexDrop:
		return &indexDropCommand, r.IndexDrop
	case *dkvpb.InternalRequest_SessionOpen:
		return &sessionOpenCommand, r.SessionOpen
	case *dkvpb.InternalRequest_SessionExpire:
		return &sessionExpireCommand, r.SessionExpire
	case *dkvpb.InternalRequest_StorageLayout:
		return &storageLayoutCommand, r.StorageLayout
	}
	return nil, nil
}

// byMessage maps the message type each command carries to its row, for
// CommandFor. Built from Lookup, so it needs no list of its own.
var byMessage = func() map[protoreflect.FullName]*Command {
	m := map[protoreflect.FullName]*Command{}
	od := (&dkvpb.InternalRequest{}).ProtoReflect().Descriptor().Oneofs().ByName("request")
	for i := 0; i < od.Fields().Len(); i++ {
		fd := od.Fields().Get(i)
		req := &dkvpb.InternalRequest{}
		rm := req.ProtoReflect()
		rm.Set(fd, protoreflect.ValueOfMessage(rm.NewField(fd).Message()))
		if c, _ := Lookup(req); c != nil {
			m[fd.Message().FullName()] = c
		}
	}
	return m
}()

// CommandFor returns the row of the command that carries a message of
// msg's type (a client's PutRequest, LockAcquireRequest, ...); nil if no
// command carries one (reads, and calls that are not commands).
func CommandFor(msg proto.Message) *Command {
	if msg == nil {
		return nil
	}
	return byMessage[msg.ProtoReflect().Descriptor().FullName()]
}

// Name is the command's field name in InternalRequest ("put", ...).
func (c *Command) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// applyLimits is what apply checks against. Apply must not depend on a
// member's configuration (a member restarted with a smaller
// --max-value-bytes would refuse an entry its peers accepted, and
// diverge), so at apply time only the structure of a request is checked;
// sizes are enforced once, before proposing.
var applyLimits = mvcc.Limits{MaxKeyBytes: 1 << 62, MaxValueBytes: 1 << 62, MaxTxnOps: 1 << 62}

// Validate checks req before it is proposed: every InvalidInput a command
// can earn without looking at the store's state. Call it on the row
// Lookup returned for req (nil included: an empty or unknown request is
// refused).
func (c *Command) Validate(req *dkvpb.InternalRequest, l mvcc.Limits) error {
	l.EnsureDefaults()
	switch {
	case req == nil:
		return dkverr.New(dkverr.InvalidInput, "request is empty")
	case req.Request == nil:
		return dkverr.New(dkverr.InvalidInput, "request has no command")
	case c == nil:
		return dkverr.New(dkverr.InvalidInput, "unknown command %T", req.Request)
	case c.validate == nil:
		return nil
	}
	return c.validate(req, l)
}

// Validate is Lookup(req) then Command.Validate.
func Validate(req *dkvpb.InternalRequest, l mvcc.Limits) error {
	c, _ := Lookup(req)
	return c.Validate(req, l)
}

// Checked reports whether the command is one a client asked for whose
// permissions the proposing member checks and stamps (the auth revision,
// see Auth.checkFresh).
func (c *Command) Checked() bool { return c != nil && c.checked }

// GrowsData reports whether req, a request for this command, can add
// data: the NOSPACE alarm refuses it.
func (c *Command) GrowsData(req *dkvpb.InternalRequest) bool {
	return c != nil && c.growsData != nil && c.growsData(req)
}

// Need is one permission a request needs on a span.
type Need struct {
	Perm auth.Perm
	Span auth.Span
	// What is the part of the request that needs it; "root" for the root
	// role (RootOnly).
	What string
}

// RootOnly is the need of requests only the root role may make.
var RootOnly = []Need{{What: "root"}}

// LocalState is what the needs of a request may read of the member's
// applied state.
type LocalState interface {
	// LeaseKeys calls fn with each key attached to lease id until fn
	// returns false.
	LeaseKeys(id int64, fn func(key []byte) bool) error
	// LeaseLocks is the keys of the locks lease id holds.
	LeaseLocks(id int64) ([][]byte, error)
}

// Needs is what msg, a client's request carrying this command, needs;
// RootOnly for a command that declares none.
func (c *Command) Needs(msg proto.Message, st LocalState) ([]Need, error) {
	if c == nil || c.needs == nil {
		return RootOnly, nil
	}
	return c.needs(msg, st)
}

// always is a growsData for commands that always can add data.
func always(*dkvpb.InternalRequest) bool { return true }

// anyUser is a needs for commands any authenticated user may make.
func anyUser(proto.Message, LocalState) ([]Need, error) { return nil, nil }

// Applier applies commands to a bare MVCC store as a Machine does, but
// without one's alarms, auth, executor or storage: for the tests of the
// packages below this one (mvcc, watch), so that they apply commands
// through the registry rather than a copy of its dispatch.
type Applier struct{ m Machine }

// NewApplier returns the Applier of kv; it becomes kv's write observer,
// as a Machine does.
func NewApplier(kv *mvcc.Store) *Applier {
	a := &Applier{m: Machine{kv: kv}}
	kv.SetObserver(&a.m.floor)
	return a
}

// Apply applies req in b.
func (a *Applier) Apply(b *pebble.Batch, req *dkvpb.InternalRequest) Result {
	return a.m.applyCommand(b, req)
}
