package state

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/queuekeys"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestScripts runs the scripts in testdata/: each applies commands to a
// fresh Machine on a temporary Pebble store, one committed batch per
// command, and prints what a member would see: the result (the response
// without its header, or the refusal) and the effects (watch events,
// lease changes, lock grants, purge). Rewrite expected output with
// go test ./internal/state -run TestScripts -rewrite, then read it.
//
// Commands (t=MS stamps the entry's time, in ms, and stays until changed;
// as=NAME remembers the lock handle a reply carries; lock=NAME sends one):
//
//	put k=KEY [v=VAL] [lease=ID] [ttl=MS] [lock=NAME] [if-absent] [if-version=N] [prev-kv]
//	delete k=KEY [prefix] [lock=NAME] [prev-kv]
//	txn                          the input holds its compares and ops:
//	  compare KEY version|value|mod|create =|!=|<|> ARG
//	  compare KEY lock =|!= NAME
//	  success|failure put KEY VAL [lock=NAME] | delete KEY | get KEY
//	counter k=KEY [delta=N]
//	compact rev=N
//	lease-grant id=ID ttl=MS
//	lease-revoke id=ID
//	lease-expire id=ID [epoch=E]    E: the epoch the leader saw expire
//	lock-acquire k=KEY owner=O [ttl=MS] [lease=ID] [wait] [as=NAME]
//	lock-release lock=NAME
//	lock-cancel k=KEY owner=O
//	enqueue q=QUEUE id=N [prio=P] [run-at=MS] [v=JSON]   a job, as client/recipe writes it
//	queue-claim q=QUEUE owner=O ttl=MS [mark] [as=NAME]
//	queue-ack q=QUEUE lock=NAME                           ack the claimed job
//	alarm member=ID [clear] [kind=corrupt] [reason=TEXT]
//	get k=KEY [prefix]           a read of the current state (no command)
//	alarms                       the alarm table
//	session-open id=ID ttl=MS    open (or keep alive) a client session
//	session-expire ids=ID,...    the leader's drop of expired sessions
//	session id=ID                a session's record and kept replies
//
// Any command takes session=ID seq=N [acked=N] to send it in a client
// session, and user=NAME for the user who made it.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{h: newHarness(t), handles: map[string]*dkvpb.LockHandle{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return s.run(t, d)
		})
	})
}

type script struct {
	h       *harness
	nowMs   int64
	handles map[string]*dkvpb.LockHandle
}

func (s *script) run(t *testing.T, d *datadriven.TestData) string {
	if d.HasArg("t") {
		d.ScanArgs(t, "t", &s.nowMs)
	}
	var req *dkvpb.InternalRequest
	switch d.Cmd {
	case "put":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: s.putReq(t, d)}}
	case "delete":
		dr := &dkvpb.DeleteRangeRequest{Key: []byte(str(t, d, "k")), Prefix: d.HasArg("prefix"), PrevKv: d.HasArg("prev-kv"), Lock: s.handle(t, d)}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: dr}}
	case "txn":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: s.txnReq(t, d)}}
	case "counter":
		c := &dkvpb.CounterRequest{Key: []byte(str(t, d, "k")), Delta: num(t, d, "delta", 1)}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: c}}
	case "compact":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: &dkvpb.CompactRequest{Revision: num(t, d, "rev", 0)}}}
	case "lease-grant":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: num(t, d, "id", 0), TtlMs: num(t, d, "ttl", 0)}}}
	case "lease-revoke":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: num(t, d, "id", 0)}}}
	case "lease-expire":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: num(t, d, "id", 0), Epoch: uint64(num(t, d, "epoch", 0))}}}
	case "lock-acquire":
		a := &dkvpb.LockAcquireRequest{Key: []byte(str(t, d, "k")), Owner: str(t, d, "owner"),
			TtlMs: num(t, d, "ttl", 0), Lease: num(t, d, "lease", 0), Wait: d.HasArg("wait")}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockAcquire{LockAcquire: a}}
	case "lock-release":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockRelease{LockRelease: &dkvpb.LockReleaseRequest{Handle: s.handle(t, d)}}}
	case "lock-cancel":
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockCancel{LockCancel: &dkvpb.LockCancelRequest{Key: []byte(str(t, d, "k")), Owner: str(t, d, "owner")}}}
	case "enqueue":
		id := fmt.Sprintf("%016x%08x", num(t, d, "id", 0), 0)
		order := queuekeys.Order(int32(num(t, d, "prio", 0)), num(t, d, "run-at", 0), id)
		key := queuekeys.Prefix(str(t, d, "q")) + queuekeys.Jobs + order
		v := `{"attempt":0,"max_attempts":3}`
		if d.HasArg("v") {
			v = str(t, d, "v")
		}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte(key), Value: []byte(v)}}}
	case "queue-claim":
		c := &dkvpb.QueueClaimRequest{QueuePrefix: []byte(queuekeys.Prefix(str(t, d, "q"))), Owner: str(t, d, "owner"),
			TtlMs: num(t, d, "ttl", 0), Mark: d.HasArg("mark")}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_QueueClaim{QueueClaim: c}}
	case "queue-ack":
		h := s.handle(t, d)
		jobs := queuekeys.Prefix(str(t, d, "q")) + queuekeys.Jobs
		order := strings.TrimPrefix(string(h.GetKey()), jobs)
		marker := queuekeys.Prefix(str(t, d, "q")) + queuekeys.Claims + order
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_QueueAck{QueueAck: &dkvpb.QueueAckRequest{Handle: h, MarkerKey: []byte(marker)}}}
	case "alarm":
		a := &dkvpb.AlarmRequest{MemberId: uint64(num(t, d, "member", 0)), Active: !d.HasArg("clear")}
		if d.HasArg("reason") {
			a.Reason = str(t, d, "reason")
		}
		if d.HasArg("kind") && str(t, d, "kind") == "corrupt" {
			a.Alarm = dkvpb.AlarmType_ALARM_TYPE_CORRUPT
		}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: a}}
	case "get":
		resp, err := s.h.m.kv.Range(s.h.store.DB(), &dkvpb.RangeRequest{Key: []byte(str(t, d, "k")), Prefix: d.HasArg("prefix")})
		if err != nil {
			return "error " + err.Error() + "\n"
		}
		var b strings.Builder
		for _, kv := range resp.GetKvs() {
			fmt.Fprintf(&b, "%s\n", kvString(kv))
		}
		if b.Len() == 0 {
			return "(none)\n"
		}
		return b.String()
	case "session-open":
		o := &dkvpb.SessionOpenRequest{Id: uint64(num(t, d, "id", 0)), TtlMs: num(t, d, "ttl", 0)}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_SessionOpen{SessionOpen: o}}
	case "session-expire":
		var ids []uint64
		for _, f := range strings.Split(str(t, d, "ids"), ",") {
			id, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("%s: ids: %v", d.Pos, err)
			}
			ids = append(ids, id)
		}
		req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_SessionExpire{SessionExpire: &dkvpb.SessionExpireRequest{Ids: ids}}}
	case "session":
		return s.session(t, uint64(num(t, d, "id", 0)))
	case "alarms":
		var b strings.Builder
		for _, a := range s.h.m.Alarms().List() {
			fmt.Fprintf(&b, "member %d %s: %s\n", a.GetMemberId(), a.GetAlarm(), a.GetReason())
		}
		if b.Len() == 0 {
			return "(none)\n"
		}
		return b.String()
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	if d.HasArg("session") {
		req.Session = &dkvpb.ClientSession{Id: uint64(num(t, d, "session", 0)), Seq: uint64(num(t, d, "seq", 0)), Acked: uint64(num(t, d, "acked", 0))}
	}
	if d.HasArg("user") {
		req.User = str(t, d, "user")
	}
	req.TimeUnixNano = s.nowMs * 1e6
	return s.print(t, d, s.h.one(req))
}

// session prints a session's record and the sequences it keeps replies
// for.
func (s *script) session(t *testing.T, id uint64) string {
	db := s.h.store.DB()
	rec, err := sessionRecord(db, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec == nil {
		return "(none)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ttl=%dms last-used=%dms floor=%d user=%q\n", rec.GetTtlMs(), rec.GetLastUsedUnixNano()/1e6, rec.GetFloor(), rec.GetUser())
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: replyKey(id, 0), UpperBound: replyKey(id, math.MaxUint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var seqs []string
	for ok := it.First(); ok; ok = it.Next() {
		seqs = append(seqs, strconv.FormatUint(binary.BigEndian.Uint64(it.Key()[len(it.Key())-8:]), 10))
	}
	fmt.Fprintf(&b, "replies under keys for seq [%s]", strings.Join(seqs, " "))
	if len(rec.GetLastReply()) > 0 {
		fmt.Fprintf(&b, ", in the record for seq %d", rec.GetMaxSeq())
	}
	b.WriteString("\n")
	return b.String()
}

func (s *script) putReq(t *testing.T, d *datadriven.TestData) *dkvpb.PutRequest {
	p := &dkvpb.PutRequest{Key: []byte(str(t, d, "k")), Lease: num(t, d, "lease", 0), TtlMs: num(t, d, "ttl", 0),
		IfAbsent: d.HasArg("if-absent"), IfVersion: num(t, d, "if-version", 0), PrevKv: d.HasArg("prev-kv"), Lock: s.handle(t, d)}
	if d.HasArg("v") {
		p.Value = []byte(str(t, d, "v"))
	}
	return p
}

// txnReq reads a txn from the command's input lines.
func (s *script) txnReq(t *testing.T, d *datadriven.TestData) *dkvpb.TxnRequest {
	txn := &dkvpb.TxnRequest{}
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "compare":
			if len(f) != 5 {
				t.Fatalf("%s: compare KEY TARGET OP ARG, got %q", d.Pos, line)
			}
			txn.Compare = append(txn.Compare, s.compare(t, d, f[1], f[2], f[3], f[4]))
		case "success", "failure":
			op := s.op(t, d, f[1:])
			if f[0] == "success" {
				txn.Success = append(txn.Success, op)
			} else {
				txn.Failure = append(txn.Failure, op)
			}
		default:
			t.Fatalf("%s: unknown txn line %q", d.Pos, line)
		}
	}
	return txn
}

func (s *script) compare(t *testing.T, d *datadriven.TestData, key, target, op, arg string) *dkvpb.Compare {
	c := &dkvpb.Compare{Key: []byte(key)}
	switch op {
	case "=":
		c.Result = dkvpb.Compare_EQUAL
	case "!=":
		c.Result = dkvpb.Compare_NOT_EQUAL
	case "<":
		c.Result = dkvpb.Compare_LESS
	case ">":
		c.Result = dkvpb.Compare_GREATER
	default:
		t.Fatalf("%s: unknown compare op %q", d.Pos, op)
	}
	n, _ := strconv.ParseInt(arg, 10, 64)
	switch target {
	case "version":
		c.Target, c.TargetUnion = dkvpb.Compare_VERSION, &dkvpb.Compare_Version{Version: n}
	case "mod":
		c.Target, c.TargetUnion = dkvpb.Compare_MOD, &dkvpb.Compare_ModRevision{ModRevision: n}
	case "create":
		c.Target, c.TargetUnion = dkvpb.Compare_CREATE, &dkvpb.Compare_CreateRevision{CreateRevision: n}
	case "value":
		c.Target, c.TargetUnion = dkvpb.Compare_VALUE, &dkvpb.Compare_Value{Value: []byte(arg)}
	case "lock":
		c.Target, c.TargetUnion = dkvpb.Compare_LOCK, &dkvpb.Compare_Lock{Lock: s.named(t, d, arg)}
	default:
		t.Fatalf("%s: unknown compare target %q", d.Pos, target)
	}
	return c
}

func (s *script) op(t *testing.T, d *datadriven.TestData, f []string) *dkvpb.RequestOp {
	if len(f) < 2 {
		t.Fatalf("%s: an op is put KEY VAL [lock=NAME], delete KEY or get KEY", d.Pos)
	}
	switch f[0] {
	case "put":
		p := &dkvpb.PutRequest{Key: []byte(f[1])}
		for _, x := range f[2:] {
			if name, ok := strings.CutPrefix(x, "lock="); ok {
				p.Lock = s.named(t, d, name)
			} else {
				p.Value = []byte(x)
			}
		}
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: p}}
	case "delete":
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte(f[1])}}}
	case "get":
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestRange{RequestRange: &dkvpb.RangeRequest{Key: []byte(f[1])}}}
	}
	t.Fatalf("%s: unknown op %q", d.Pos, f[0])
	return nil
}

// handle is the handle named by lock=NAME, nil without one.
func (s *script) handle(t *testing.T, d *datadriven.TestData) *dkvpb.LockHandle {
	if !d.HasArg("lock") {
		return nil
	}
	return s.named(t, d, str(t, d, "lock"))
}

func (s *script) named(t *testing.T, d *datadriven.TestData, name string) *dkvpb.LockHandle {
	h, ok := s.handles[name]
	if !ok {
		t.Fatalf("%s: no handle named %q (as=NAME on the command that got it)", d.Pos, name)
	}
	return h
}

// print is a result and its effects, one line each; it remembers the
// handle the reply carries under as=NAME.
func (s *script) print(t *testing.T, d *datadriven.TestData, res Result) string {
	var b strings.Builder
	if res.Err != nil {
		fmt.Fprintf(&b, "refused %s: %s (rev=%d)\n", dkverr.CodeOf(res.Err), dkverr.Message(res.Err), res.Revision)
	} else {
		fmt.Fprintf(&b, "ok rev=%d", res.Revision)
		if res.Resp != nil {
			if f := msgString(res.Resp.ProtoReflect()); f != "" {
				fmt.Fprintf(&b, " %s", f)
			}
		}
		b.WriteString("\n")
	}
	if d.HasArg("as") {
		h, ok := replyHandle(res.Resp)
		if !ok {
			t.Fatalf("%s: as= on a reply without a handle", d.Pos)
		}
		s.handles[str(t, d, "as")] = h
	}
	for _, e := range res.Effects.Events {
		fmt.Fprintf(&b, "event %s %s\n", e.Type, kvString(e.KV))
	}
	for _, c := range res.Effects.Leases {
		fmt.Fprintf(&b, "lease %s id=%d ttl=%d remaining=%d epoch=%d\n", leaseKind(c.Kind), c.ID, c.TTLMs, c.RemainingMs, c.Epoch)
	}
	for _, h := range res.Effects.Locks {
		fmt.Fprintf(&b, "lock granted %s\n", handleString(h))
	}
	if res.Effects.Purge {
		b.WriteString("purge\n")
	}
	return b.String()
}

func replyHandle(m proto.Message) (*dkvpb.LockHandle, bool) {
	type handler interface{ GetHandle() *dkvpb.LockHandle }
	r, ok := m.(handler)
	if !ok || r.GetHandle() == nil {
		return nil, false
	}
	return r.GetHandle(), true
}

func leaseKind(k lease.ChangeKind) string {
	return [...]string{lease.Granted: "granted", lease.Renewed: "renewed", lease.Checkpointed: "checkpointed", lease.Revoked: "revoked"}[k]
}

func kvString(kv *dkvpb.KeyValue) string {
	s := fmt.Sprintf("%s=%q create=%d mod=%d ver=%d", kv.GetKey(), kv.GetValue(), kv.GetCreateRevision(), kv.GetModRevision(), kv.GetVersion())
	if kv.GetLease() != 0 {
		s += fmt.Sprintf(" lease=%d", kv.GetLease())
	}
	return s
}

func handleString(h *dkvpb.LockHandle) string {
	return fmt.Sprintf("%s owner=%s lease=%d token=%d", h.GetKey(), h.GetOwner(), h.GetLease(), h.GetToken())
}

// msgString prints m's set fields in field order (never the header),
// deterministically, unlike prototext, whose spacing varies on purpose.
func msgString(m protoreflect.Message) string {
	var parts []string
	fds := m.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.Name() == "header" || !m.Has(fd) {
			continue
		}
		parts = append(parts, string(fd.Name())+"="+valueString(fd, m.Get(fd)))
	}
	return strings.Join(parts, " ")
}

func valueString(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.IsList():
		l := v.List()
		out := make([]string, l.Len())
		for i := range out {
			out[i] = scalarString(fd, l.Get(i))
		}
		return "[" + strings.Join(out, ", ") + "]"
	case fd.IsMap():
		var out []string
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			out = append(out, k.String()+":"+scalarString(fd.MapValue(), mv))
			return true
		})
		sort.Strings(out)
		return "{" + strings.Join(out, ", ") + "}"
	}
	return scalarString(fd, v)
}

func scalarString(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if kv, ok := v.Message().Interface().(*dkvpb.KeyValue); ok {
			return "{" + kvString(kv) + "}"
		}
		return "{" + msgString(v.Message()) + "}"
	case protoreflect.BytesKind:
		return strconv.Quote(string(v.Bytes()))
	case protoreflect.StringKind:
		return strconv.Quote(v.String())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
	}
	return v.String()
}

func str(t *testing.T, d *datadriven.TestData, key string) string {
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

func num(t *testing.T, d *datadriven.TestData, key string, def int64) int64 {
	if !d.HasArg(key) {
		return def
	}
	var v int64
	d.ScanArgs(t, key, &v)
	return v
}
