package state

import (
	"bytes"

	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/queuekeys"
)

// A queue's claims meet its jobs in key order, and acked jobs are the
// first ones: their deleted keys are Pebble tombstones at the head of
// the queue's j/ span until a compaction drops them, and a claim that
// starts at the head steps over every one of them. After a few thousand
// jobs that made each claim (on the apply goroutine, where it holds up
// every other command) cost milliseconds.
//
// The floor is where a claim's scan may start instead: a key of the
// jobs span such that every live job key below it is claimed (locked,
// with its claim marker), so a claim would skip it anyway. It is learnt
// by a claim (the first key its scan met that was not such a job, after
// its own claims), and lowered to a job's key by every change that can
// make that job claimable or locked without a marker: a put of the job
// key (an enqueue, a nack, a txn), the release of its lock (whatever
// ends the claim) and the deletion of its marker. The MVCC engine tells
// of each as it happens (queueFloor is its mvcc.WriteObserver). A
// lowered floor is never wrong, only slower. It lives in memory only, is
// dropped when the engine reloads its state (a snapshot install, a
// restart) and is then learnt again by the next claim. Which jobs a claim takes,
// its lock and marker writes, LockedUnmarked and NextRunAtMs do not
// depend on it (the keys it skips are none of those); only how many
// keys count against max_scan does.

// queueJobsPrefix returns the jobs prefix (Root + name + "/j/") of a key
// under a queue's j/ span, or nil.
func queueJobsPrefix(key []byte) []byte {
	if !bytes.HasPrefix(key, []byte(queuekeys.Root)) {
		return nil
	}
	i := bytes.IndexByte(key[len(queuekeys.Root):], '/')
	if i <= 0 {
		return nil
	}
	p := len(queuekeys.Root) + i + 1
	if !bytes.HasPrefix(key[p:], []byte(queuekeys.Jobs)) {
		return nil
	}
	return key[:p+len(queuekeys.Jobs)]
}

// isQueuePrefix says whether prefix is a queue's prefix (Root + name +
// "/", name without '/'), the only prefixes whose floor is kept.
func isQueuePrefix(prefix []byte) bool {
	if !bytes.HasPrefix(prefix, []byte(queuekeys.Root)) || len(prefix) < len(queuekeys.Root)+2 {
		return false
	}
	return bytes.IndexByte(prefix[len(queuekeys.Root):], '/') == len(prefix)-len(queuekeys.Root)-1
}

// queueFloor is a hint per queue (its jobs prefix): no live job key is
// below it. Only the speed of a claim's scan depends on it, never its
// result; absent means "unknown, scan from the start".
type queueFloor struct {
	floor map[string][]byte
}

var _ mvcc.WriteObserver = (*queueFloor)(nil)

// Put lowers the floor of key's queue if key, being put, is below it.
func (f *queueFloor) Put(_ *mvcc.Writer, key []byte) { f.note(key) }

// Deleted lowers the floor of a queue whose claim marker key is being
// deleted to the marker's job.
func (f *queueFloor) Deleted(w *mvcc.Writer, key []byte) {
	if len(f.floor) == 0 || !bytes.HasPrefix(key, []byte(queuekeys.Root)) {
		return
	}
	i := bytes.IndexByte(key[len(queuekeys.Root):], '/')
	if i <= 0 {
		return
	}
	p := len(queuekeys.Root) + i + 1
	order, ok := bytes.CutPrefix(key[p:], []byte(queuekeys.Claims))
	if !ok || len(order) != queuekeys.OrderLen {
		return
	}
	job := append(append(append([]byte(nil), key[:p]...), queuekeys.Jobs...), order...)
	f.Unlocked(w, job)
}

// Unlocked lowers the floor to job, whose lock was released, if it is a
// live job key (an ack deletes the job before its marker and its lock: a
// gone job lowers nothing).
func (f *queueFloor) Unlocked(w *mvcc.Writer, job []byte) {
	if len(f.floor) == 0 || queueJobsPrefix(job) == nil {
		return
	}
	if w.Exists(job) {
		f.note(job)
	}
}

// Reloaded forgets every floor.
func (f *queueFloor) Reloaded() { f.floor = nil }

// note lowers the floor of key's queue if key is below it.
func (f *queueFloor) note(key []byte) {
	if len(f.floor) == 0 {
		return
	}
	jp := queueJobsPrefix(key)
	if jp == nil {
		return
	}
	if fl, ok := f.floor[string(jp)]; ok && bytes.Compare(key, fl) < 0 {
		f.floor[string(jp)] = bytes.Clone(key)
	}
}

// scanStart is where a claim's scan of the jobs span may start.
func (f *queueFloor) scanStart(jobs []byte, keep bool) []byte {
	if fl, ok := f.floor[string(jobs)]; keep && ok {
		return fl
	}
	return jobs
}

// learn records the new floor (nil: the span's end).
func (f *queueFloor) learn(jobs, first []byte) {
	if first == nil {
		first = keyrange.PrefixEnd(jobs)
	}
	if f.floor == nil {
		f.floor = map[string][]byte{}
	}
	f.floor[string(jobs)] = bytes.Clone(first)
}
