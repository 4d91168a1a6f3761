package state

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/queuekeys"
	"google.golang.org/protobuf/proto"
)

// The job queue's claim (api/dkv/v1/queue.proto): one command finds the
// first visible job of a queue laid out as client/recipe lays it out and
// grants the lock on its key, so competing consumers never try the same
// job and a claim needs no scan by the client. Everything it looks at is
// replicated state (keys, the lock table) plus the time stamped into the
// entry, so every member claims the same job. It is built on the MVCC
// engine's exported primitives (mvcc/primitives.go); the engine knows
// nothing of queues.

var queueClaimCommand = Command{
	name: "queue_claim",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return validateQueueClaim(req.GetQueueClaim(), l)
	},
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// It reads the queue's jobs and markers and locks one of them.
		r := msg.(*dkvpb.QueueClaimRequest)
		n := []Need{{auth.Read | auth.Write, auth.SpanOf(r.GetQueuePrefix(), nil, true), "queue claim"}}
		for _, a := range r.GetAcks() {
			n = queueAckNeeds(a, n) // each ack it carries needs what it needs alone
		}
		return n, nil
	},
	growsData: always,
	write: func(m *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		// Run-at is compared with the entry's time, never this member's
		// clock, so every member claims the same job.
		qc := queueClaim(w, &m.floor, req.GetQueueClaim(), req.GetTimeUnixNano()/1e6)
		qc.ClaimedUnixNano = req.GetTimeUnixNano()
		return qc, nil
	},
}

var queueAckCommand = Command{
	name: "queue_ack",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return validateQueueAck(req.GetQueueAck(), l)
	},
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// It deletes the job and its marker, writes the puts and releases
		// the job's lock; a refusal reveals only the claim's state.
		return queueAckNeeds(msg.(*dkvpb.QueueAckRequest), nil), nil
	},
	growsData: func(req *dkvpb.InternalRequest) bool {
		return len(req.GetQueueAck().GetPuts()) > 0
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return queueAck(w, req.GetQueueAck())
	},
}

var queueAckBatchCommand = Command{
	name: "queue_ack_batch",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return validateQueueAckBatch(req.GetQueueAckBatch(), l)
	},
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// Each ack needs what it needs alone.
		var n []Need
		for _, a := range msg.(*dkvpb.QueueAckBatchRequest).GetAcks() {
			n = queueAckNeeds(a, n)
		}
		return n, nil
	},
	growsData: func(req *dkvpb.InternalRequest) bool {
		for _, a := range req.GetQueueAckBatch().GetAcks() {
			if len(a.GetPuts()) > 0 {
				return true
			}
		}
		return false
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return queueAckBatch(w, req.GetQueueAckBatch()), nil
	},
}

func queueAckNeeds(r *dkvpb.QueueAckRequest, n []Need) []Need {
	n = append(n, Need{auth.Write, auth.Key(r.GetHandle().GetKey()), "queue ack"}, Need{auth.Write, auth.Key(r.GetMarkerKey()), "queue ack marker"})
	for _, p := range r.GetPuts() {
		n = putNeeds(p, n)
	}
	return n
}

// DefaultQueueScan and MaxQueueScan bound the job keys one claim visits.
const (
	DefaultQueueScan = 1024
	MaxQueueScan     = 100_000
	// MaxQueueClaimJobs bounds the jobs one claim takes (max_jobs).
	MaxQueueClaimJobs = 64
)

// queueOrderLen is the length of a job key's <order>: 8 hex digits of
// inverted priority, 16 of run-at (Unix ms) and a 24-character id.
const queueOrderLen = 8 + 16 + 24

// validateQueueClaim checks a claim's structure and bounds.
func validateQueueClaim(c *dkvpb.QueueClaimRequest, l mvcc.Limits) error {
	p := c.GetQueuePrefix()
	if err := mvcc.CheckKey("queue prefix", p, l); err != nil {
		return err
	}
	if p[len(p)-1] != '/' {
		return dkverr.New(dkverr.InvalidInput, "queue prefix %q must end in /", p)
	}
	if err := mvcc.CheckOwner(c.GetOwner()); err != nil {
		return err
	}
	if err := lease.ValidateTTL("queue claim ttl_ms", c.GetTtlMs()); err != nil {
		return err
	}
	if len(c.GetAcks()) > 0 {
		if err := validateQueueAckBatch(&dkvpb.QueueAckBatchRequest{Acks: c.GetAcks()}, l); err != nil {
			return err
		}
	}
	if n := c.GetMaxJobs(); n < 0 || n > MaxQueueClaimJobs {
		return dkverr.New(dkverr.InvalidInput, "queue claim max_jobs is %d; it must be between 0 (one job) and %d", n, MaxQueueClaimJobs)
	}
	if n := c.GetMaxScan(); n < 0 || n > MaxQueueScan {
		return dkverr.New(dkverr.InvalidInput, "queue claim max_scan is %d; it must be between 0 (default %d) and %d", n, DefaultQueueScan, MaxQueueScan)
	}
	return nil
}

// queueClaim claims the first visible job: in key order (priority, run-at,
// enqueue order), the first whose run-at is at or before nowMs (the
// entry's time), whose key is not locked and which has no claim marker.
// The lock is granted to c.Owner on a new lease of c.TtlMs owned by the
// lock, exactly as a TryAcquire with a TTL would. A job already locked by
// c.Owner (a retry of a claim that applied) is returned again. With
// c.MaxJobs > 1 it claims up to that many visible jobs the same way, in
// that order, each on its own lock and lease; a retry returns the jobs
// it finds locked by c.Owner and claims none besides.
func queueClaim(w *mvcc.Writer, f *queueFloor, c *dkvpb.QueueClaimRequest, nowMs int64) *dkvpb.QueueClaimResponse {
	resp := &dkvpb.QueueClaimResponse{}
	if len(c.GetAcks()) > 0 {
		resp.AckResults = queueAckBatch(w, &dkvpb.QueueAckBatchRequest{Acks: c.GetAcks()}).GetResults()
	}
	prefix := c.GetQueuePrefix()
	marker := func(order []byte) []byte {
		return append(append(append([]byte(nil), prefix...), queuekeys.Claims...), order...)
	}
	if w.Exists(append(append([]byte(nil), prefix...), queuekeys.Paused...)) {
		resp.Paused = true
		return resp
	}
	limit := c.GetMaxScan()
	if limit == 0 {
		limit = DefaultQueueScan
	}
	maxJobs := int(max(c.GetMaxJobs(), 1))
	jobs := append(append([]byte(nil), prefix...), queuekeys.Jobs...)
	type hit struct {
		kv    *dkvpb.KeyValue
		again *dkvpb.LockHandle // a retry's: the lock already ours
	}
	var (
		seen  int64
		hits  []hit
		retry bool // a job locked by c.Owner was met: claim nothing new
		// For the floor (queuefloor.go): the first key met that a
		// later claim must look at again, and the last key met.
		stop, last []byte
		atEnd      = true // the scan met every key of the span
	)
	stopAt := func(k []byte) {
		if stop == nil || bytes.Compare(k, stop) < 0 {
			stop = bytes.Clone(k)
		}
	}
	keepFloor := isQueuePrefix(prefix)
	from := f.scanStart(jobs, keepFloor)
	w.ScanLatest(from, keyrange.PrefixEnd(jobs), func(key []byte, kvOf func() *dkvpb.KeyValue) bool {
		if seen >= limit {
			resp.Truncated = len(hits) == 0
			atEnd = false
			return false
		}
		seen++
		last = append(last[:0], key...)
		order := key[len(jobs):]
		if len(order) != queueOrderLen {
			return true // not a job key
		}
		runAt, err := strconv.ParseUint(string(order[8:24]), 16, 64)
		if err != nil {
			return true
		}
		if w.Locked(key) {
			h, ok := w.LockHolder(key)
			if ok && h.GetOwner() == c.GetOwner() {
				if !retry {
					for _, f := range hits {
						stopAt(f.kv.Key) // visible, and now left alone
					}
					retry, hits = true, hits[:0]
				}
				hits = append(hits, hit{kv: kvOf(), again: h})
				atEnd = len(hits) < maxJobs
				return atEnd
			}
			if !w.Exists(marker(order)) {
				resp.LockedUnmarked++
				stopAt(key)
			}
			return true
		}
		if int64(runAt) > nowMs {
			if resp.NextRunAtMs == 0 || int64(runAt) < resp.NextRunAtMs {
				resp.NextRunAtMs = int64(runAt)
			}
			stopAt(key)
			return true
		}
		if w.Exists(marker(order)) {
			return true // claimed (its lock released ahead of its marker)
		}
		if retry {
			stopAt(key)
			return true
		}
		hits = append(hits, hit{kv: kvOf()})
		atEnd = len(hits) < maxJobs
		return atEnd
	})
	defer func() {
		if !keepFloor {
			return
		}
		// After the claims below: a job claimed and marked is one a
		// later claim may step over; one claimed unmarked is not.
		switch {
		case stop != nil:
			f.learn(jobs, stop)
		case atEnd:
			f.learn(jobs, nil)
		default:
			f.learn(jobs, append(last, 0))
		}
	}()
	if len(hits) == 0 {
		return resp
	}
	resp.Found, resp.Truncated = true, false
	for i, h := range hits {
		kv, handle, marked := claimOne(w, c, jobs, h.kv, h.again, marker)
		if !marked {
			stopAt(h.kv.Key)
		}
		if i == 0 {
			resp.Kv, resp.Handle, resp.Marked = kv, handle, marked
			continue
		}
		resp.More = append(resp.More, &dkvpb.QueueClaimedJob{Kv: kv, Handle: handle, Marked: marked})
	}
	return resp
}

// claimOne finishes the claim of one job found by queueClaim: a retry's
// job (again) is returned as it is; another is locked on a new lease
// and, with c.Mark, marked.
func claimOne(w *mvcc.Writer, c *dkvpb.QueueClaimRequest, jobs []byte, foundV *dkvpb.KeyValue, again *dkvpb.LockHandle, marker func([]byte) []byte) (*dkvpb.KeyValue, *dkvpb.LockHandle, bool) {
	found := foundV.Key
	if again != nil {
		marked := false
		if c.GetMark() {
			marked = w.Exists(marker(found[len(jobs):]))
		}
		return foundV, again, marked
	}
	id := w.GrantLease(c.GetTtlMs())
	handle := w.GrantLock(found, c.GetOwner(), id, true)
	if !c.GetMark() {
		return foundV, handle, false
	}
	v, attempt, ok := nextAttempt(foundV.Value)
	if !ok {
		return foundV, handle, false
	}
	w.WritePut(&dkvpb.PutRequest{Key: found, Value: v, Lease: foundV.Lease})
	m := []byte(`{"attempt":` + strconv.FormatInt(attempt, 10) + `,"owner":` + jsonString(c.GetOwner()) + `,"token":` + strconv.FormatInt(handle.Token, 10) + `}`)
	w.WritePut(&dkvpb.PutRequest{Key: marker(found[len(jobs):]), Value: m, Lease: id})
	kv, _ := w.Latest(found)
	return kv, handle, true
}

// attemptOf reads a job's "attempt" and "max_attempts" (absent: 0).
func attemptOf(v []byte) (attempt int64, maxAttempts int64) {
	var r struct {
		Attempt     int64 `json:"attempt"`
		MaxAttempts int64 `json:"max_attempts"`
	}
	if json.Unmarshal(v, &r) != nil {
		return -1, -1
	}
	return r.Attempt, r.MaxAttempts
}

// nextAttempt returns the job's JSON object with its "attempt" raised by
// one, and that attempt; false if v is no JSON object or the job has
// used its attempts. Re-encoding sorts the object's keys: deterministic
// on every member. The bytes are a stored format that every member must
// produce alike, whatever its version: they are exactly those of
// decoding v into a map and encoding it again, and the attempt numbers
// are read as attemptOf reads them (field names matched without regard
// to case), in one decoding of v rather than two.
func nextAttempt(v []byte) ([]byte, int64, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		return nil, 0, false
	}
	attempt, maxAttempts, ok := attemptsIn(obj)
	if !ok {
		attempt, maxAttempts = attemptOf(v) // an ambiguous object: as attemptOf reads it
	}
	if attempt < 0 || attempt >= maxAttempts {
		return nil, 0, false
	}
	obj["attempt"] = json.RawMessage(strconv.FormatInt(attempt+1, 10))
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, 0, false
	}
	return out, attempt + 1, true
}

// attemptsIn is attemptOf on a decoded object: -1, -1 where attemptOf's
// decoding fails; ok false when a field name occurs in several cases
// (which one attemptOf takes depends on their order in the text).
func attemptsIn(obj map[string]json.RawMessage) (attempt, maxAttempts int64, ok bool) {
	var a, m json.RawMessage
	na, nm := 0, 0
	for k, raw := range obj {
		switch {
		case strings.EqualFold(k, "attempt"):
			a, na = raw, na+1
		case strings.EqualFold(k, "max_attempts"):
			m, nm = raw, nm+1
		}
	}
	if na > 1 || nm > 1 {
		return 0, 0, false
	}
	for _, f := range []struct {
		raw json.RawMessage
		dst *int64
	}{{a, &attempt}, {m, &maxAttempts}} {
		if f.raw != nil && json.Unmarshal(f.raw, f.dst) != nil {
			return -1, -1, true
		}
	}
	return attempt, maxAttempts, true
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// MaxQueueAckPuts bounds the puts one queue ack carries.
const MaxQueueAckPuts = 16

// validateQueueAck checks an ack's structure and bounds.
func validateQueueAck(a *dkvpb.QueueAckRequest, l mvcc.Limits) error {
	if a.GetHandle() == nil {
		return dkverr.New(dkverr.InvalidInput, "queue ack has no claim handle")
	}
	if err := mvcc.ValidateLockHandle(a.GetHandle(), l); err != nil {
		return err
	}
	if err := mvcc.CheckKey("queue ack marker key", a.GetMarkerKey(), l); err != nil {
		return err
	}
	if n := len(a.GetPuts()); n > MaxQueueAckPuts {
		return dkverr.New(dkverr.InvalidInput, "queue ack has %d puts; the limit is %d", n, MaxQueueAckPuts)
	}
	for _, p := range a.GetPuts() {
		if err := mvcc.ValidatePut(p, l); err != nil {
			return err
		}
	}
	return nil
}

// queueAck ends a claim: while a.Handle is current it deletes the job and
// its marker, writes a.Puts and releases the lock, all in this command.
// A claim that is not current is refused with Locked, unless this is a
// retry of an ack that applied: the lock is free, its last token is the
// handle's (nobody claimed the job since) and the job is gone.
func queueAck(w *mvcc.Writer, a *dkvpb.QueueAckRequest) (*dkvpb.QueueAckResponse, error) {
	hd := a.GetHandle()
	h, ok := w.CurrentLock(hd)
	if !ok {
		if !w.Locked(hd.Key) {
			if last := w.LastLockToken(hd.Key); last == hd.Token && !w.Exists(hd.Key) {
				return &dkvpb.QueueAckResponse{Already: true}, nil
			}
		}
		return nil, mvcc.StaleHandleError(hd)
	}
	for _, p := range a.GetPuts() {
		if err := w.CheckPut(p); err != nil {
			return nil, err
		}
	}
	if bytes.Equal(a.GetMarkerKey(), hd.Key) {
		return nil, dkverr.New(dkverr.InvalidInput, "queue ack marker key is the job's key")
	}
	if err := w.CheckUnlocked(a.GetMarkerKey()); err != nil {
		return nil, err
	}
	w.WriteDelete(&dkvpb.DeleteRangeRequest{Key: bytes.Clone(hd.Key), Lock: hd})
	w.WriteDelete(&dkvpb.DeleteRangeRequest{Key: bytes.Clone(a.GetMarkerKey())})
	for _, p := range a.GetPuts() {
		w.WritePut(p)
	}
	w.ReleaseLock(&h)
	return &dkvpb.QueueAckResponse{}, nil
}

// MaxQueueAckBatch bounds the acks of one AckBatch.
const MaxQueueAckBatch = 64

// validateQueueAckBatch checks a batch of acks: each alone, and no job twice.
func validateQueueAckBatch(b *dkvpb.QueueAckBatchRequest, l mvcc.Limits) error {
	acks := b.GetAcks()
	if len(acks) == 0 || len(acks) > MaxQueueAckBatch {
		return dkverr.New(dkverr.InvalidInput, "queue ack batch has %d acks; it must have 1 to %d", len(acks), MaxQueueAckBatch)
	}
	keys := make(map[string]bool, len(acks))
	for i, a := range acks {
		if err := validateQueueAck(a, l); err != nil {
			return dkverr.New(dkverr.InvalidInput, "queue ack batch, ack %d: %s", i, dkverr.Message(err))
		}
		k := string(a.GetHandle().GetKey())
		if keys[k] {
			return dkverr.New(dkverr.InvalidInput, "queue ack batch acks job %q twice", k)
		}
		keys[k] = true
	}
	return nil
}

// queueAckBatch applies each ack as queueAck does, in order, at one
// revision: a refused ack changes nothing and does not stop the others.
func queueAckBatch(w *mvcc.Writer, b *dkvpb.QueueAckBatchRequest) *dkvpb.QueueAckBatchResponse {
	resp := &dkvpb.QueueAckBatchResponse{Results: make([]*dkvpb.QueueAckResult, len(b.GetAcks()))}
	for i, a := range b.GetAcks() {
		r, err := queueAck(w, a)
		if err != nil {
			code := dkverr.CodeOf(err)
			resp.Results[i] = &dkvpb.QueueAckResult{Reason: code.Reason(), Message: dkverr.Message(err)}
			continue
		}
		resp.Results[i] = &dkvpb.QueueAckResult{Ok: true, Already: r.GetAlready()}
	}
	return resp
}
