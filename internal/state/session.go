package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/mvcc"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// Client sessions: exactly-once writes (the Raft dissertation, §6.3).
//
// A client opens a session (an id it picks, a TTL) and numbers its
// writes in it. For a command carrying (session, seq), apply keeps the
// reply under (session, seq); the same (session, seq) again, from a
// client that did not learn the first outcome and sent it again to any
// member, gets that reply and changes nothing. The client's acked (it has
// the replies below it) lets apply drop old replies, so a session holds
// about as many replies as the client has writes in flight.
//
// A session expires once unused for its TTL, measured on the times the
// proposers stamp into the entries, so every member decides alike. A
// command in an unknown or expired session (or another user's) is
// refused with SessionExpired and not applied. The leader proposes
// SessionExpire for the sessions it sees expired, to drop their records;
// apply drops each only if it is expired at that entry's time.
//
// Only applied commands have a reply kept: a refused one changed nothing,
// so applying it when it comes again still applies it at most once.

// Session TTL bounds (SessionOpenRequest.ttl_ms).
const (
	MinSessionTTLMs = 1_000
	MaxSessionTTLMs = 3_600_000
)

// dropPerCommand bounds the replies one command drops as the session's
// acked moves, so a jump in acked costs one batch no more than this.
const dropPerCommand = 64

var sessionOpenCommand = Command{
	name: "session_open",
	validate: func(req *dkvpb.InternalRequest, _ mvcc.Limits) error {
		r := req.GetSessionOpen()
		if r.GetId() == 0 {
			return dkverr.New(dkverr.InvalidInput, "session id 0: pick a random non-zero id")
		}
		if t := r.GetTtlMs(); t < MinSessionTTLMs || t > MaxSessionTTLMs {
			return dkverr.New(dkverr.InvalidInput, "session ttl %dms: must be %d to %d ms", t, MinSessionTTLMs, MaxSessionTTLMs)
		}
		if req.GetSession() != nil {
			return dkverr.New(dkverr.InvalidInput, "a session is opened outside a session")
		}
		if req.GetTimeUnixNano() == 0 {
			return dkverr.New(dkverr.InvalidInput, "session open without the proposer's time")
		}
		return nil
	},
	needs: anyUser,
	// A new session is a record more: refused while NOSPACE is raised.
	growsData: always,
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		r := req.GetSessionOpen()
		if err := membersApplySessions(b); err != nil {
			return m.refused(err)
		}
		rec := m.session(b, r.GetId())
		switch {
		case rec == nil:
			rec = &dkvpb.SessionRecord{TtlMs: r.GetTtlMs(), User: req.GetUser(), Floor: 1}
		case rec.GetUser() != req.GetUser():
			// Ids are random: this is a guess at another user's session.
			return m.refused(dkverr.New(dkverr.SessionExpired, "session %x belongs to another user", r.GetId()))
		default:
			rec.TtlMs = r.GetTtlMs()
		}
		rec.LastUsedUnixNano = max(rec.GetLastUsedUnixNano(), req.GetTimeUnixNano())
		m.putSession(b, r.GetId(), rec)
		rev := m.kv.Revision()
		return Result{Revision: rev, Resp: &dkvpb.SessionOpenResponse{
			Header: &dkvpb.ResponseHeader{Revision: rev}, Id: r.GetId(), TtlMs: rec.GetTtlMs(),
		}}
	},
}

var sessionExpireCommand = Command{
	name: "session_expire",
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		for _, id := range req.GetSessionExpire().GetIds() {
			rec := m.session(b, id)
			if rec == nil || !sessionExpired(rec, req.GetTimeUnixNano()) {
				continue
			}
			delete(m.sessions, id)
			must(b.Delete(sessionKey(id), nil))
			must(b.DeleteRange(replyKey(id, 0), keyrange.PrefixEnd(replyKey(id, 0)[:len(keys.SessionReplyPrefix)+8]), nil))
		}
		return Result{Revision: m.kv.Revision()}
	},
}

// SessionsSince is the first minor version (of major 0) whose members
// apply client sessions. An older member would apply a write sent again
// a second time where the others answer it from the session, and their
// states would differ; so a session opens only while every member in the
// member table, at that point of the log, has published a version at
// least this.
const SessionsSince = 2

// membersApplySessions refuses, with SessionsUnavailable's error, while
// some member in the table has not published a version that applies
// sessions.
func membersApplySessions(r pebble.Reader) error {
	ms, err := Members(r)
	must(err)
	for _, m := range ms {
		if !versionAppliesSessions(m.GetVersion()) {
			v := m.GetVersion()
			if v == "" {
				v = "no version yet"
			}
			return &dkverr.Error{Code: dkverr.SessionExpired, Metadata: map[string]string{"sessions": "unavailable"},
				Msg: fmt.Sprintf("client sessions are not available: member %x (%s) runs %s, and every member must run dkv 0.%d or later", m.GetId(), m.GetName(), v, SessionsSince)}
		}
	}
	return nil
}

// SessionsUnavailable reports whether err is SessionOpen's refusal for
// a cluster with a member that does not apply sessions.
func SessionsUnavailable(err error) bool {
	var de *dkverr.Error
	return errors.As(err, &de) && de.Metadata["sessions"] == "unavailable"
}

// OldMember returns a member in ms that published a version which does
// not apply sessions (not one that has published none), or nil.
func OldMember(ms []*dkvpb.Member) *dkvpb.Member {
	for _, m := range ms {
		if m.GetVersion() != "" && !versionAppliesSessions(m.GetVersion()) {
			return m
		}
	}
	return nil
}

func versionAppliesSessions(v string) bool {
	major, minor, err := ParseVersion(v)
	return err == nil && (major > 0 || minor >= SessionsSince)
}

// ParseVersion reads a server version, "major.minor[.patch][-suffix]".
func ParseVersion(v string) (major, minor int, err error) {
	core, _, _ := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return 0, 0, fmt.Errorf("version %q is not major.minor.patch", v)
	}
	if major, err = strconv.Atoi(parts[0]); err != nil || major < 0 {
		return 0, 0, fmt.Errorf("version %q is not major.minor.patch", v)
	}
	if minor, err = strconv.Atoi(parts[1]); err != nil || minor < 0 {
		return 0, 0, fmt.Errorf("version %q is not major.minor.patch", v)
	}
	return major, minor, nil
}

// sessionExpired reports whether rec is expired at the time now (unix
// nanoseconds, from an entry).
func sessionExpired(rec *dkvpb.SessionRecord, now int64) bool {
	return now-rec.GetLastUsedUnixNano() > rec.GetTtlMs()*1e6
}

// applyInSession applies req, which carries a session, at most once.
func (m *Machine) applyInSession(b *pebble.Batch, req *dkvpb.InternalRequest) Result {
	s := req.GetSession()
	rec := m.session(b, s.GetId())
	switch {
	case req.GetTimeUnixNano() == 0:
		return m.refused(dkverr.New(dkverr.InvalidInput, "a command in a session without the proposer's time"))
	case rec == nil:
		return m.refused(dkverr.New(dkverr.SessionExpired, "session %x is unknown or expired; the request was not applied", s.GetId()))
	case rec.GetUser() != req.GetUser():
		return m.refused(dkverr.New(dkverr.SessionExpired, "session %x belongs to another user; the request was not applied", s.GetId()))
	case sessionExpired(rec, req.GetTimeUnixNano()):
		return m.refused(dkverr.New(dkverr.SessionExpired, "session %x expired (unused for more than %dms); the request was not applied", s.GetId(), rec.GetTtlMs()))
	case s.GetSeq() == 0 || s.GetAcked() > s.GetSeq():
		return m.refused(dkverr.New(dkverr.InvalidInput, "session sequence %d with acked %d: sequences start at 1 and acked may not pass them", s.GetSeq(), s.GetAcked()))
	case s.GetSeq() < rec.GetFloor():
		return m.refused(dkverr.New(dkverr.InvalidInput, "session %x: sequence %d is below %d, whose replies the client acknowledged", s.GetId(), s.GetSeq(), rec.GetFloor()))
	}
	var res Result
	switch {
	case s.GetSeq() > rec.GetMaxSeq():
		// Above every kept reply: new, nothing to look up.
		res = m.applyKeep(b, req, rec)
	case s.GetSeq() == rec.GetMaxSeq() && len(rec.GetLastReply()) > 0:
		// Applied before, its reply in the record.
		resp, err := decodeReply(rec.GetLastReply())
		must(err)
		res = m.keptResult(resp)
	default:
		if data, closer, err := b.Get(replyKey(s.GetId(), s.GetSeq())); err == nil {
			resp, derr := decodeReply(data)
			closer.Close()
			must(derr)
			// Applied before: its reply, and no effects a second time.
			res = m.keptResult(resp)
		} else if !errors.Is(err, pebble.ErrNotFound) {
			must(err)
		} else {
			res = m.applyKeep(b, req, rec)
		}
	}
	// Drop the replies the client has acknowledged: the one in the record,
	// and those under keys, a bounded number per command (keys exist only
	// up to keyed_max).
	if s.GetAcked() > rec.GetMaxSeq() {
		rec.LastReply = nil
	}
	floor := rec.GetFloor()
	hi := min(s.GetAcked(), rec.GetKeyedMax()+1)
	to := min(hi, floor+dropPerCommand)
	for ; floor < to; floor++ {
		must(b.Delete(replyKey(s.GetId(), floor), nil))
	}
	if to == hi {
		floor = max(floor, s.GetAcked())
	}
	rec.Floor = floor
	rec.LastUsedUnixNano = max(rec.GetLastUsedUnixNano(), req.GetTimeUnixNano())
	m.putSession(b, s.GetId(), rec)
	return res
}

// session returns session id's record (nil: none), from the machine's
// cache of the records or b. The cache is written through by putSession
// in the same apply that changes a record, and emptied when a snapshot
// replaces the state; it spares every write in a session a read.
func (m *Machine) session(b *pebble.Batch, id uint64) *dkvpb.SessionRecord {
	if rec, ok := m.sessions[id]; ok {
		return rec
	}
	rec, err := sessionRecord(b, id)
	must(err)
	if rec != nil {
		if m.sessions == nil {
			m.sessions = map[uint64]*dkvpb.SessionRecord{}
		}
		m.sessions[id] = rec
	}
	return rec
}

// putSession writes rec in b and the cache.
func (m *Machine) putSession(b *pebble.Batch, id uint64, rec *dkvpb.SessionRecord) {
	must(setSession(b, id, rec))
	if m.sessions == nil {
		m.sessions = map[uint64]*dkvpb.SessionRecord{}
	}
	m.sessions[id] = rec
}

// applyKeep applies req, which is in session rec, and keeps its reply if
// it applied.
func (m *Machine) applyKeep(b *pebble.Batch, req *dkvpb.InternalRequest, rec *dkvpb.SessionRecord) Result {
	res := m.apply(b, req)
	kept := res.Resp
	if res.Err != nil {
		// A refusal is kept too: the client was told it, and a copy of
		// the same write proposed again (to a new leader) or sent again
		// must get the same refusal, not apply where the first did not.
		kept = refusalReply(res.Err)
	}
	if kept == nil {
		return res
	}
	data, err := encodeReply(kept)
	must(err)
	s := req.GetSession()
	if s.GetSeq() < rec.GetMaxSeq() {
		// Out of order (the client has several writes in flight): under
		// its own key.
		must(b.Set(replyKey(s.GetId(), s.GetSeq()), data, nil))
		rec.KeyedMax = max(rec.GetKeyedMax(), s.GetSeq())
		return res
	}
	// The newest: into the record. The reply it displaces moves to its
	// key unless the client has acknowledged it.
	if old := rec.GetMaxSeq(); len(rec.GetLastReply()) > 0 && old >= s.GetAcked() {
		must(b.Set(replyKey(s.GetId(), old), rec.GetLastReply(), nil))
		rec.KeyedMax = max(rec.GetKeyedMax(), old)
	}
	rec.MaxSeq, rec.LastReply = s.GetSeq(), data
	return res
}

// refusalReply is a refusal as a kept reply: its gRPC status, which
// carries the DKV code and metadata (dkverr.Error.GRPCStatus).
func refusalReply(err error) proto.Message {
	st, ok := status.FromError(err)
	if !ok {
		st = status.New(codes.Unknown, err.Error())
	}
	return st.Proto()
}

// keptResult is the result of a write answered from its kept reply: the
// reply, or the refusal it was.
func (m *Machine) keptResult(resp proto.Message) Result {
	if st, ok := resp.(*spb.Status); ok {
		return m.refused(dkverr.FromGRPC(status.FromProto(st).Err()))
	}
	return Result{Resp: resp, Revision: m.kv.Revision()}
}

// A kept reply is stored as a 0 byte, the reply's message name (a
// uvarint length and the name) and the message. The 0 byte tells it from
// the anypb.Any that earlier builds of this version stored (an Any starts
// with its type URL's tag, 0x0a), which decodeReply still reads.
func encodeReply(resp proto.Message) ([]byte, error) {
	name := resp.ProtoReflect().Descriptor().FullName()
	size := proto.Size(resp)
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+size)
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, resp)
}

func decodeReply(data []byte) (proto.Message, error) {
	if len(data) == 0 || data[0] != 0 {
		var a anypb.Any
		if err := proto.Unmarshal(data, &a); err != nil {
			return nil, err
		}
		return a.UnmarshalNew()
	}
	n, w := binary.Uvarint(data[1:])
	if w <= 0 || n > uint64(len(data)-1-w) {
		return nil, errors.New("kept reply: bad message name length")
	}
	name := protoreflect.FullName(data[1+w : 1+w+int(n)])
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("kept reply of type %s: %w", name, err)
	}
	msg := mt.New().Interface()
	if err := proto.Unmarshal(data[1+w+int(n):], msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// The session records: "s/cs/<id, 8 bytes BE>" -> dkvpb.SessionRecord,
// "s/cr/<id, 8 bytes BE><seq, 8 bytes BE>" -> the reply (encodeReply). The
// bytes are a stored format.

func sessionKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), keys.SessionPrefix...), id)
}

func replyKey(id, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(append([]byte(nil), keys.SessionReplyPrefix...), id)
	return binary.BigEndian.AppendUint64(k, seq)
}

func sessionRecord(r pebble.Reader, id uint64) (*dkvpb.SessionRecord, error) {
	data, closer, err := r.Get(sessionKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	rec := &dkvpb.SessionRecord{}
	if err := proto.Unmarshal(data, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

func setSession(b *pebble.Batch, id uint64, rec *dkvpb.SessionRecord) error {
	data, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	return b.Set(sessionKey(id), data, nil)
}

// ExpiredSessions lists, as of r's view, up to limit sessions expired at
// now (unix nanoseconds): what the leader proposes to drop.
func ExpiredSessions(r pebble.Reader, now int64, limit int) ([]uint64, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: keys.SessionPrefix, UpperBound: keys.SessionEnd})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ids []uint64
	for ok := it.First(); ok && len(ids) < limit; ok = it.Next() {
		k := it.Key()
		if len(k) != len(keys.SessionPrefix)+8 {
			continue
		}
		rec := &dkvpb.SessionRecord{}
		if err := proto.Unmarshal(it.Value(), rec); err != nil {
			return nil, err
		}
		if sessionExpired(rec, now) {
			ids = append(ids, binary.BigEndian.Uint64(k[len(keys.SessionPrefix):]))
		}
	}
	return ids, it.Error()
}
