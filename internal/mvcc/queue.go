package mvcc

import (
	"bytes"
	"encoding/json"
	"strconv"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
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
)

// queueOrderLen is the length of a job key's <order>: 8 hex digits of
// inverted priority, 16 of run-at (Unix ms) and a 24-character id.
const queueOrderLen = 8 + 16 + 24

func validateQueueClaim(c *dkvpb.QueueClaimRequest, l Limits) error {
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
// c.Owner (a retry of a claim that applied) is returned again.
func (w *Writer) QueueClaim(c *dkvpb.QueueClaimRequest, nowMs int64) *dkvpb.QueueClaimResponse {
	resp := &dkvpb.QueueClaimResponse{}
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
	jobs := append(append([]byte(nil), prefix...), queuekeys.Jobs...)
	var (
		seen   int64
		found  []byte
		foundV *dkvpb.KeyValue
		again  *dkvpb.LockHandle
	)
	err := scanLatest(w.b, makeSpan(jobs, nil, true), func(key []byte, rec *record) bool {
		if seen >= limit {
			resp.Truncated = true
			return false
		}
		seen++
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
				again = handleOf(&h)
				found, foundV = jobKV(key, rec)
				return false
			}
			if _, marked := w.get(marker(order)); !marked {
				resp.LockedUnmarked++
			}
			return true
		}
		if int64(runAt) > nowMs {
			if resp.NextRunAtMs == 0 || int64(runAt) < resp.NextRunAtMs {
				resp.NextRunAtMs = int64(runAt)
			}
			return true
		}
		if _, marked := w.get(marker(order)); marked {
			return true // claimed (its lock released ahead of its marker)
		}
		found, foundV = jobKV(key, rec)
		return false
	})
	must(err)
	if found == nil {
		return resp
	}
	resp.Found, resp.Kv, resp.Truncated = true, foundV, false
	if again != nil {
		resp.Handle = again
		if c.GetMark() {
			_, resp.Marked = w.get(marker(found[len(jobs):]))
		}
		return resp
	}
	id := w.grant(0, c.GetTtlMs(), false)
	resp.Handle = w.grantLock(found, c.GetOwner(), id, true, true)
	if c.GetMark() {
		if v, ok := nextAttempt(foundV.Value); ok {
			w.put(&dkvpb.PutRequest{Key: found, Value: v, Lease: foundV.Lease}, &dkvpb.PutResponse{})
			attempt, _ := attemptOf(v)
			m := []byte(`{"attempt":` + strconv.FormatInt(attempt, 10) + `,"owner":` + jsonString(c.GetOwner()) + `,"token":` + strconv.FormatInt(resp.Handle.Token, 10) + `}`)
			w.put(&dkvpb.PutRequest{Key: marker(found[len(jobs):]), Value: m, Lease: id}, &dkvpb.PutResponse{})
			rec, _ := w.get(found)
			_, resp.Kv = jobKV(found, &rec)
			resp.Marked = true
		}
	}
	return resp
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
// one; false if v is no JSON object or the job has used its attempts.
// Re-encoding sorts the object's keys: deterministic on every member.
func nextAttempt(v []byte) ([]byte, bool) {
	attempt, maxAttempts := attemptOf(v)
	if attempt < 0 || attempt >= maxAttempts {
		return nil, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		return nil, false
	}
	obj["attempt"] = json.RawMessage(strconv.FormatInt(attempt+1, 10))
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, false
	}
	return out, true
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

func validateQueueAck(a *dkvpb.QueueAckRequest, l Limits) error {
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
