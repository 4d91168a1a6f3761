package mvcc

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/lock"
	"github.com/dkv-io/dkv/internal/queuekeys"
)

// The job queue's claim (api/dkv/v1/queue.proto): one command finds the
// first visible job of a queue laid out as client/recipe lays it out and
// grants the lock on its key, so competing consumers never try the same
// job and a claim needs no scan by the client. Everything it looks at is
// replicated state (keys, the lock table) plus the time stamped into the
// entry, so every member claims the same job.

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

// ValidateQueueClaim checks a claim's structure and bounds.
func ValidateQueueClaim(c *dkvpb.QueueClaimRequest, l Limits) error {
	p := c.GetQueuePrefix()
	if err := checkKey("queue prefix", p, l); err != nil {
		return err
	}
	if p[len(p)-1] != '/' {
		return invalid("queue prefix %q must end in /", p)
	}
	if err := checkOwner(c.GetOwner()); err != nil {
		return err
	}
	if err := lease.ValidateTTL("queue claim ttl_ms", c.GetTtlMs()); err != nil {
		return err
	}
	if len(c.GetAcks()) > 0 {
		if err := ValidateQueueAckBatch(&dkvpb.QueueAckBatchRequest{Acks: c.GetAcks()}, l); err != nil {
			return err
		}
	}
	if n := c.GetMaxJobs(); n < 0 || n > MaxQueueClaimJobs {
		return invalid("queue claim max_jobs is %d; it must be between 0 (one job) and %d", n, MaxQueueClaimJobs)
	}
	if n := c.GetMaxScan(); n < 0 || n > MaxQueueScan {
		return invalid("queue claim max_scan is %d; it must be between 0 (default %d) and %d", n, DefaultQueueScan, MaxQueueScan)
	}
	return nil
}

// QueueClaim claims the first visible job: in key order (priority, run-at,
// enqueue order), the first whose run-at is at or before nowMs (the
// entry's time), whose key is not locked and which has no claim marker.
// The lock is granted to c.Owner on a new lease of c.TtlMs owned by the
// lock, exactly as a TryAcquire with a TTL would. A job already locked by
// c.Owner (a retry of a claim that applied) is returned again. With
// c.MaxJobs > 1 it claims up to that many visible jobs the same way, in
// that order, each on its own lock and lease; a retry returns the jobs
// it finds locked by c.Owner and claims none besides.
func (w *Writer) QueueClaim(c *dkvpb.QueueClaimRequest, nowMs int64) *dkvpb.QueueClaimResponse {
	resp := &dkvpb.QueueClaimResponse{}
	if len(c.GetAcks()) > 0 {
		resp.AckResults = w.QueueAckBatch(&dkvpb.QueueAckBatchRequest{Acks: c.GetAcks()}).GetResults()
	}
	prefix := c.GetQueuePrefix()
	marker := func(order []byte) []byte {
		return append(append(append([]byte(nil), prefix...), queuekeys.Claims...), order...)
	}
	if _, ok := w.get(append(append([]byte(nil), prefix...), queuekeys.Paused...)); ok {
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
		key   []byte
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
	from := w.s.queueScanStart(jobs, keepFloor)
	err := scanLatest(w.b, span{start: from, end: keyrange.PrefixEnd(jobs)}, func(key []byte, rec *record) bool {
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
		if _, locked := w.s.held[string(key)]; locked {
			h, ok := w.holder(key)
			if ok && h.Owner == c.GetOwner() {
				if !retry {
					for _, f := range hits {
						stopAt(f.key) // visible, and now left alone
					}
					retry, hits = true, hits[:0]
				}
				k, kv := jobKV(key, rec)
				hits = append(hits, hit{key: k, kv: kv, again: handleOf(&h)})
				atEnd = len(hits) < maxJobs
				return atEnd
			}
			if _, marked := w.get(marker(order)); !marked {
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
		if _, marked := w.get(marker(order)); marked {
			return true // claimed (its lock released ahead of its marker)
		}
		if retry {
			stopAt(key)
			return true
		}
		k, kv := jobKV(key, rec)
		hits = append(hits, hit{key: k, kv: kv})
		atEnd = len(hits) < maxJobs
		return atEnd
	})
	must(err)
	defer func() {
		if !keepFloor {
			return
		}
		// After the claims below: a job claimed and marked is one a
		// later claim may step over; one claimed unmarked is not.
		switch {
		case stop != nil:
			w.s.queueFloorLearn(jobs, stop)
		case atEnd:
			w.s.queueFloorLearn(jobs, nil)
		default:
			w.s.queueFloorLearn(jobs, append(last, 0))
		}
	}()
	if len(hits) == 0 {
		return resp
	}
	resp.Found, resp.Truncated = true, false
	for i, h := range hits {
		kv, handle, marked := w.claimOne(c, jobs, h.key, h.kv, h.again, marker)
		if !marked {
			stopAt(h.key)
		}
		if i == 0 {
			resp.Kv, resp.Handle, resp.Marked = kv, handle, marked
			continue
		}
		resp.More = append(resp.More, &dkvpb.QueueClaimedJob{Kv: kv, Handle: handle, Marked: marked})
	}
	return resp
}

// claimOne finishes the claim of one job found by QueueClaim: a retry's
// job (again) is returned as it is; another is locked on a new lease
// and, with c.Mark, marked.
func (w *Writer) claimOne(c *dkvpb.QueueClaimRequest, jobs, found []byte, foundV *dkvpb.KeyValue, again *dkvpb.LockHandle, marker func([]byte) []byte) (*dkvpb.KeyValue, *dkvpb.LockHandle, bool) {
	if again != nil {
		marked := false
		if c.GetMark() {
			_, marked = w.get(marker(found[len(jobs):]))
		}
		return foundV, again, marked
	}
	id := w.grant(0, c.GetTtlMs(), false)
	handle := w.grantLock(found, c.GetOwner(), id, true, true)
	if !c.GetMark() {
		return foundV, handle, false
	}
	v, attempt, ok := nextAttempt(foundV.Value)
	if !ok {
		return foundV, handle, false
	}
	w.put(&dkvpb.PutRequest{Key: found, Value: v, Lease: foundV.Lease}, &dkvpb.PutResponse{})
	m := []byte(`{"attempt":` + strconv.FormatInt(attempt, 10) + `,"owner":` + jsonString(c.GetOwner()) + `,"token":` + strconv.FormatInt(handle.Token, 10) + `}`)
	w.put(&dkvpb.PutRequest{Key: marker(found[len(jobs):]), Value: m, Lease: id}, &dkvpb.PutResponse{})
	rec, _ := w.get(found)
	_, kv := jobKV(found, &rec)
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

// jobKV copies a visited key and its record (valid only during the visit).
func jobKV(key []byte, rec *record) ([]byte, *dkvpb.KeyValue) {
	k := bytes.Clone(key)
	kv := rec.kv(k)
	kv.Value = bytes.Clone(rec.value)
	return k, kv
}

// MaxQueueAckPuts bounds the puts one queue ack carries.
const MaxQueueAckPuts = 16

// ValidateQueueAck checks an ack's structure and bounds.
func ValidateQueueAck(a *dkvpb.QueueAckRequest, l Limits) error {
	if a.GetHandle() == nil {
		return invalid("queue ack has no claim handle")
	}
	if err := ValidateLockHandle(a.GetHandle(), l); err != nil {
		return err
	}
	if err := checkKey("queue ack marker key", a.GetMarkerKey(), l); err != nil {
		return err
	}
	if n := len(a.GetPuts()); n > MaxQueueAckPuts {
		return invalid("queue ack has %d puts; the limit is %d", n, MaxQueueAckPuts)
	}
	for _, p := range a.GetPuts() {
		if err := ValidatePut(p, l); err != nil {
			return err
		}
	}
	return nil
}

// QueueAck ends a claim: while a.Handle is current it deletes the job and
// its marker, writes a.Puts and releases the lock, all in this command.
// A claim that is not current is refused with Locked, unless this is a
// retry of an ack that applied: the lock is free, its last token is the
// handle's (nobody claimed the job since) and the job is gone.
func (w *Writer) QueueAck(a *dkvpb.QueueAckRequest) (*dkvpb.QueueAckResponse, error) {
	hd := a.GetHandle()
	h, ok := w.current(hd)
	if !ok {
		if _, held := w.s.held[string(hd.Key)]; !held {
			last, err := lock.LastToken(w.b, hd.Key)
			must(err)
			if _, exists := w.get(hd.Key); last == hd.Token && !exists {
				return &dkvpb.QueueAckResponse{Already: true}, nil
			}
		}
		return nil, staleErr(hd)
	}
	for _, p := range a.GetPuts() {
		if err := w.checkPut(p); err != nil {
			return nil, err
		}
	}
	if bytes.Equal(a.GetMarkerKey(), hd.Key) {
		return nil, invalid("queue ack marker key is the job's key")
	}
	if err := w.checkLocked(a.GetMarkerKey(), nil); err != nil {
		return nil, err
	}
	w.deleteRange(&dkvpb.DeleteRangeRequest{Key: bytes.Clone(hd.Key), Lock: hd})
	w.deleteRange(&dkvpb.DeleteRangeRequest{Key: bytes.Clone(a.GetMarkerKey())})
	for _, p := range a.GetPuts() {
		w.put(p, &dkvpb.PutResponse{})
	}
	w.releaseLock(&h)
	return &dkvpb.QueueAckResponse{}, nil
}

// MaxQueueAckBatch bounds the acks of one AckBatch.
const MaxQueueAckBatch = 64

// ValidateQueueAckBatch checks a batch of acks: each alone, and no job twice.
func ValidateQueueAckBatch(b *dkvpb.QueueAckBatchRequest, l Limits) error {
	acks := b.GetAcks()
	if len(acks) == 0 || len(acks) > MaxQueueAckBatch {
		return invalid("queue ack batch has %d acks; it must have 1 to %d", len(acks), MaxQueueAckBatch)
	}
	keys := make(map[string]bool, len(acks))
	for i, a := range acks {
		if err := ValidateQueueAck(a, l); err != nil {
			return invalid("queue ack batch, ack %d: %s", i, dkverr.Message(err))
		}
		k := string(a.GetHandle().GetKey())
		if keys[k] {
			return invalid("queue ack batch acks job %q twice", k)
		}
		keys[k] = true
	}
	return nil
}

// QueueAckBatch applies each ack as QueueAck does, in order, at one
// revision: a refused ack changes nothing and does not stop the others.
func (w *Writer) QueueAckBatch(b *dkvpb.QueueAckBatchRequest) *dkvpb.QueueAckBatchResponse {
	resp := &dkvpb.QueueAckBatchResponse{Results: make([]*dkvpb.QueueAckResult, len(b.GetAcks()))}
	for i, a := range b.GetAcks() {
		r, err := w.QueueAck(a)
		if err != nil {
			code := dkverr.CodeOf(err)
			resp.Results[i] = &dkvpb.QueueAckResult{Reason: code.Reason(), Message: dkverr.Message(err)}
			continue
		}
		resp.Results[i] = &dkvpb.QueueAckResult{Ok: true, Already: r.GetAlready()}
	}
	return resp
}
