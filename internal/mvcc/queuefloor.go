package mvcc

import (
	"bytes"

	"github.com/dkv-io/dkv/internal/keyrange"
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
// jobs span such that no live job key is below it. It is learnt by a
// claim (the first live key its scan met, or the span's end if it met
// none) and lowered by every put of a job key below it (writePut), so
// it stays true whatever writes a job: an enqueue, a nack, a txn. A
// lowered floor is never wrong, only slower. It lives in memory only,
// is dropped by Reload (a snapshot install, a restart) and is then
// learnt again by the next claim. The scan's result does not depend on
// it, so members with and without a floor claim the same jobs.

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

// queueFloorNote lowers the floor of key's queue if key, being put, is
// below it.
func (s *Store) queueFloorNote(key []byte) {
	if len(s.queueFloor) == 0 {
		return
	}
	jp := queueJobsPrefix(key)
	if jp == nil {
		return
	}
	if f, ok := s.queueFloor[string(jp)]; ok && bytes.Compare(key, f) < 0 {
		s.queueFloor[string(jp)] = bytes.Clone(key)
	}
}

// queueScanStart is where a claim's scan of the jobs span may start.
func (s *Store) queueScanStart(jobs []byte, keep bool) []byte {
	if f, ok := s.queueFloor[string(jobs)]; keep && ok {
		return f
	}
	return jobs
}

// queueFloorLearn records the first live key a scan from queueScanStart
// met (nil: it met none, so no live key is in the span).
func (s *Store) queueFloorLearn(jobs, first []byte) {
	if first == nil {
		first = keyrange.PrefixEnd(jobs)
	}
	if s.queueFloor == nil {
		s.queueFloor = map[string][]byte{}
	}
	s.queueFloor[string(jobs)] = bytes.Clone(first)
}
