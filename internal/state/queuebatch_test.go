package state

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/proto"
)

func claimBatch(owner string, atMs int64, n int64) *dkvpb.InternalRequest {
	req := claim(owner, atMs)
	req.GetQueueClaim().Mark = true
	req.GetQueueClaim().MaxJobs = n
	return req
}

// batchJobs lists a batch claim's jobs in the order returned.
func batchJobs(t *testing.T, r Result) []*dkvpb.QueueClaimedJob {
	t.Helper()
	c := claimed(t, r)
	if !c.Found {
		if len(c.More) > 0 {
			t.Fatalf("claim found nothing but returned %d more jobs", len(c.More))
		}
		return nil
	}
	return append([]*dkvpb.QueueClaimedJob{{Kv: c.Kv, Handle: c.Handle, Marked: c.Marked}}, c.More...)
}

func jobKeys(js []*dkvpb.QueueClaimedJob) []string {
	var out []string
	for _, j := range js {
		out = append(out, string(j.Kv.Key))
	}
	return out
}

func markerOf(job string) string { return qprefix + "c/" + job[len(qprefix)+2:] }

// TestQueueClaimBatchOrder: a batch claim takes the first visible jobs
// in claim order (priority, run-at, enqueue), skipping scheduled and
// claimed ones, each on its own lock, lease and marker; a retry by the
// same owner returns the same jobs and claims no others.
func TestQueueClaimBatchOrder(t *testing.T) {
	h := newHarness(t)
	low1, low2, low3 := jobKey(0, 1000, 1), jobKey(0, 1000, 2), jobKey(0, 2000, 3)
	high := jobKey(5, 1000, 4)
	later := jobKey(9, 50_000, 5)
	for _, k := range []string{low3, later, low2, high, low1} {
		h.ok(put(k, `{"max_attempts":3}`, 0))
	}
	js := batchJobs(t, h.one(claimBatch("o1", 10_000, 3)))
	if got, want := jobKeys(js), []string{high, low1, low2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batch claimed %q, want %q", got, want)
	}
	leases := map[int64]bool{}
	for _, j := range js {
		if string(j.Handle.GetKey()) != string(j.Kv.Key) || !j.Marked || leases[j.Handle.GetLease()] || j.Handle.GetToken() <= 0 {
			t.Fatalf("job %s: handle %v marked %v; want its own lock on a lease of its own, marked", j.Kv.Key, j.Handle, j.Marked)
		}
		leases[j.Handle.GetLease()] = true
		if string(j.Kv.Value) != `{"attempt":1,"max_attempts":3}` {
			t.Fatalf("job %s value %s, want attempt 1 counted", j.Kv.Key, j.Kv.Value)
		}
	}
	// A retry by the owner, with a new visible job ahead: the same jobs.
	h.ok(put(jobKey(0, 1500, 6), `{"max_attempts":3}`, 0))
	if got := jobKeys(batchJobs(t, h.one(claimBatch("o1", 10_000, 3)))); fmt.Sprint(got) != fmt.Sprint(jobKeys(js)) {
		t.Fatalf("retry claimed %q, want the first attempt's %q", got, jobKeys(js))
	}
	// Another consumer gets what is left and visible, in order.
	if got, want := jobKeys(batchJobs(t, h.one(claimBatch("o2", 10_000, 8)))), []string{jobKey(0, 1500, 6), low3}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("second batch claimed %q, want %q", got, want)
	}
	c := claimed(t, h.one(claimBatch("o3", 10_000, 8)))
	if c.Found || c.NextRunAtMs != 50_000 {
		t.Fatalf("with the rest claimed: %v; want nothing, next run-at 50000", c)
	}
	// Out of range max_jobs is refused.
	for _, n := range []int64{-1, 65} {
		var de *dkverr.Error
		if r := h.one(claimBatch("o4", 10_000, n)); !errors.As(r.Err, &de) || de.Code != dkverr.InvalidInput {
			t.Fatalf("max_jobs %d: %v, want InvalidInput", n, r.Err)
		}
	}
}

func ackBatch(acks ...*dkvpb.QueueAckRequest) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_QueueAckBatch{QueueAckBatch: &dkvpb.QueueAckBatchRequest{Acks: acks}}}
}

func ackOf(j *dkvpb.QueueClaimedJob) *dkvpb.QueueAckRequest {
	return &dkvpb.QueueAckRequest{Handle: j.Handle, MarkerKey: []byte(markerOf(string(j.Kv.Key)))}
}

// TestQueueAckBatch: each ack of a batch is applied or refused on its
// own, in one command; a refused one (its claim expired) changes
// nothing; a retry of the batch reports the applied acks as already
// done.
func TestQueueAckBatch(t *testing.T) {
	h := newHarness(t)
	a, b, c := jobKey(0, 0, 1), jobKey(0, 0, 2), jobKey(0, 0, 3)
	for _, k := range []string{a, b, c} {
		h.ok(put(k, `{"max_attempts":3}`, 0))
	}
	js := batchJobs(t, h.one(claimBatch("o1", 1, 3)))
	if len(js) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(js))
	}
	// b's claim expires: its ack must be refused.
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: js[1].Handle.Lease, Epoch: 1}}})
	req := ackBatch(ackOf(js[0]), ackOf(js[1]), ackOf(js[2]))
	r := h.ok(proto.Clone(req).(*dkvpb.InternalRequest))
	res := r.Resp.(*dkvpb.QueueAckBatchResponse).Results
	if len(res) != 3 || !res[0].Ok || res[0].Already || res[1].Ok || res[1].Reason != "LOCKED" || !res[2].Ok || res[2].Already {
		t.Fatalf("results %v; want ok, LOCKED, ok", res)
	}
	for k, want := range map[string]bool{a: false, b: true, c: false, markerOf(a): false, markerOf(c): false} {
		if _, ok := get(t, h, k); ok != want {
			t.Fatalf("after the batch, %s exists=%v, want %v", k, ok, want)
		}
	}
	// b is visible again and can be claimed; the retry of the batch says
	// a and c were done and still refuses b (now someone else's claim).
	if k := claimedKey(t, h.one(claimBatch("o2", 2, 1))); k != b {
		t.Fatalf("after its claim expired claimed %q, want %q", k, b)
	}
	res = h.ok(proto.Clone(req).(*dkvpb.InternalRequest)).Resp.(*dkvpb.QueueAckBatchResponse).Results
	if !res[0].Ok || !res[0].Already || res[1].Ok || res[1].Reason != "LOCKED" || !res[2].Ok || !res[2].Already {
		t.Fatalf("retry results %v; want already, LOCKED, already", res)
	}
	var de *dkverr.Error
	if r := h.one(ackBatch(ackOf(js[0]), ackOf(js[0]))); !errors.As(r.Err, &de) || de.Code != dkverr.InvalidInput {
		t.Fatalf("a batch acking one job twice: %v, want InvalidInput", r.Err)
	}
	if r := h.one(ackBatch()); !errors.As(r.Err, &de) || de.Code != dkverr.InvalidInput {
		t.Fatalf("an empty batch: %v, want InvalidInput", r.Err)
	}
}

func get(t *testing.T, h *harness, k string) (*dkvpb.KeyValue, bool) {
	t.Helper()
	r, err := h.m.kv.Range(h.store.DB(), &dkvpb.RangeRequest{Key: []byte(k)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return nil, false
	}
	return r.Kvs[0], true
}

// TestQueueClaimFloorJobBelow: after the head of a queue was claimed and
// acked (the claim then starts its scan past it), a job put ahead of
// everything (a higher priority) is still the next one claimed.
func TestQueueClaimFloorJobBelow(t *testing.T) {
	h := newHarness(t)
	for i := range 6 {
		h.ok(put(jobKey(0, 1000, i), `{"max_attempts":3}`, 0))
	}
	for range 3 {
		js := batchJobs(t, h.one(claimBatch("o", 2000, 1)))
		h.ok(ackBatch(ackOf(js[0])))
	}
	urgent := jobKey(7, 1000, 99)
	h.ok(put(urgent, `{"max_attempts":3}`, 0))
	if k := claimedKey(t, h.one(claimBatch("o2", 2000, 1))); k != urgent {
		t.Fatalf("claimed %q, want the urgent job %q put ahead of the acked ones", k, urgent)
	}
	// And one written by a txn (as a nack's move is) below the floor.
	early := jobKey(0, 10, 98)
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{
		{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte(early), Value: []byte(`{"max_attempts":3}`)}}}}}}})
	if k := claimedKey(t, h.one(claimBatch("o3", 2000, 1))); k != early {
		t.Fatalf("claimed %q, want %q put by a txn ahead of the rest", k, early)
	}
}

// TestQueueClaimFloorFollowsWrites: the MVCC engine tells the machine's
// floor of the writes that matter. A claim that stopped at its last job
// learns a floor just past it (every job below is claimed and marked);
// a job put below the floor lowers it to that job; a reload of the state
// (a snapshot install) forgets it.
func TestQueueClaimFloorFollowsWrites(t *testing.T) {
	h := newHarness(t)
	for i := range 4 {
		h.ok(put(jobKey(0, 1000, i), `{"max_attempts":3}`, 0))
	}
	jobs := qprefix + "j/"
	batchJobs(t, h.one(claimBatch("o", 2000, 2)))
	if got, want := string(h.m.floor.scanStart([]byte(jobs), true)), jobKey(0, 1000, 1)+"\x00"; got != want {
		t.Fatalf("after claiming two jobs the scan starts at %q, want %q", got, want)
	}
	urgent := jobKey(9, 1000, 9)
	h.ok(put(urgent, `{"max_attempts":3}`, 0))
	if got := string(h.m.floor.scanStart([]byte(jobs), true)); got != urgent {
		t.Fatalf("after a job was put below the floor the scan starts at %q, want %q", got, urgent)
	}
	if err := h.m.kv.Reload(h.store.DB()); err != nil {
		t.Fatal(err)
	}
	if got := string(h.m.floor.scanStart([]byte(jobs), true)); got != jobs {
		t.Fatalf("after a reload the scan starts at %q, want the span's start %q", got, jobs)
	}
}

// TestQueueClaimFloorEquivalence: a member that keeps the claim's scan
// floor and one that forgets it before every claim (as a restart or a
// snapshot install does) give the same responses and the same state.
func TestQueueClaimFloorEquivalence(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	a, b := newHarness(t), newHarness(t)
	var open []*dkvpb.QueueClaimedJob
	n := 0
	for step := range 1500 {
		var req *dkvpb.InternalRequest
		switch x := rng.IntN(10); {
		case x < 4:
			n++
			req = put(jobKey(int32(rng.IntN(3)), int64(rng.IntN(4))*100, n), `{"max_attempts":2}`, 0)
		case x < 7:
			req = claimBatch(fmt.Sprint("o", step), int64(rng.IntN(5))*100, int64(1+rng.IntN(3)))
		case x < 9 && len(open) > 0:
			k := rng.IntN(len(open))
			j := open[k]
			open = append(open[:k], open[k+1:]...)
			switch rng.IntN(4) {
			case 0: // the claim expires: marker and lock go
				req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: j.Handle.Lease, Epoch: 1}}}
			case 1: // the lock is released ahead of the marker
				req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockRelease{LockRelease: &dkvpb.LockReleaseRequest{Handle: j.Handle}}}
			case 2: // the marker goes ahead of the lock
				req = del(markerOf(string(j.Kv.Key)))
			default:
				req = ackBatch(ackOf(j))
			}
		case x < 9:
			req = del(markerOf(jobKey(int32(rng.IntN(3)), int64(rng.IntN(4))*100, 1+rng.IntN(max(n, 1)))))
		default:
			req = del(jobKey(int32(rng.IntN(3)), int64(rng.IntN(4))*100, 1+rng.IntN(max(n, 1))))
		}
		ra := a.one(proto.Clone(req).(*dkvpb.InternalRequest))
		if req.GetQueueClaim() != nil {
			if err := b.m.kv.Reload(b.store.DB()); err != nil {
				t.Fatal(err)
			}
		}
		rb := b.one(proto.Clone(req).(*dkvpb.InternalRequest))
		if (ra.Err == nil) != (rb.Err == nil) || ra.Revision != rb.Revision || (ra.Resp != nil && !proto.Equal(ra.Resp, rb.Resp)) {
			t.Fatalf("step %d (%v) gave %+v and %+v", step, req, ra, rb)
		}
		if req.GetQueueClaim() != nil && ra.Err == nil {
			open = append(open, batchJobs(t, ra)...)
		}
	}
}

// TestQueueClaimAfterExpiryBehindClaimed: with claimed jobs at the head
// (which later claims step over), a claim that expires or is released
// makes its job claimable again, in order, and one whose marker goes
// first is counted as locked without a marker.
func TestQueueClaimAfterExpiryBehindClaimed(t *testing.T) {
	h := newHarness(t)
	for i := range 8 {
		h.ok(put(jobKey(0, 1000, i), `{"max_attempts":5}`, 0))
	}
	js := batchJobs(t, h.one(claimBatch("o1", 2000, 4)))
	more := batchJobs(t, h.one(claimBatch("o2", 2000, 2)))
	if len(js) != 4 || len(more) != 2 || string(more[0].Kv.Key) != jobKey(0, 1000, 4) {
		t.Fatalf("claimed %q then %q", jobKeys(js), jobKeys(more))
	}
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: js[1].Handle.Lease, Epoch: 1}}})
	if k := claimedKey(t, h.one(claimBatch("o3", 2000, 1))); k != string(js[1].Kv.Key) {
		t.Fatalf("after js[1]'s claim expired claimed %q, want %q", k, js[1].Kv.Key)
	}
	// A release ends the claim (its lease, with the marker, goes too).
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockRelease{LockRelease: &dkvpb.LockReleaseRequest{Handle: js[0].Handle}}})
	if k := claimedKey(t, h.one(claimBatch("o5", 2000, 1))); k != string(js[0].Kv.Key) {
		t.Fatalf("after js[0]'s claim was released claimed %q, want %q", k, js[0].Kv.Key)
	}
	// The marker goes first: locked unmarked, counted, not claimable.
	h.ok(del(markerOf(string(js[2].Kv.Key))))
	c := claimed(t, h.one(claimBatch("o6", 2000, 2)))
	if string(c.Kv.GetKey()) != jobKey(0, 1000, 6) || len(c.More) != 1 || string(c.More[0].Kv.GetKey()) != jobKey(0, 1000, 7) || c.LockedUnmarked != 1 {
		t.Fatalf("claim %v; want the last two visible jobs, js[2] counted as locked without a marker", c)
	}
	c = claimed(t, h.one(claimBatch("o7", 2000, 1)))
	if c.Found || c.LockedUnmarked != 1 {
		t.Fatalf("claim %v; want none found and js[2] counted as locked without a marker", c)
	}
}

// TestQueueClaimWithAcks: a claim that carries acks applies them first,
// each on its own, in the same command and at one revision, and then
// claims; the acks apply even when the claim finds the queue paused.
func TestQueueClaimWithAcks(t *testing.T) {
	h := newHarness(t)
	for i := range 5 {
		h.ok(put(jobKey(0, 0, i), `{"max_attempts":3}`, 0))
	}
	js := batchJobs(t, h.one(claimBatch("o1", 1, 2)))
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: js[1].Handle.Lease, Epoch: 1}}})
	req := claimBatch("o2", 1, 2)
	req.GetQueueClaim().Acks = []*dkvpb.QueueAckRequest{ackOf(js[0]), ackOf(js[1])}
	r := h.ok(req)
	c := claimed(t, r)
	if len(c.AckResults) != 2 || !c.AckResults[0].Ok || c.AckResults[1].Ok || c.AckResults[1].Reason != "LOCKED" {
		t.Fatalf("ack results %v; want ok, LOCKED", c.AckResults)
	}
	// js[1]'s claim expired, so it is visible again and first in line.
	if got, want := jobKeys(batchJobs(t, r)), []string{string(js[1].Kv.Key), jobKey(0, 0, 2)}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %q, want %q", got, want)
	}
	if _, ok := get(t, h, string(js[0].Kv.Key)); ok {
		t.Fatalf("acked job %s still there", js[0].Kv.Key)
	}
	next := batchJobs(t, r)
	h.ok(put(qprefix+"c/paused", "1", 0))
	req = claimBatch("o3", 1, 2)
	req.GetQueueClaim().Acks = []*dkvpb.QueueAckRequest{ackOf(next[0])}
	c = claimed(t, h.ok(req))
	if !c.Paused || c.Found || len(c.AckResults) != 1 || !c.AckResults[0].Ok {
		t.Fatalf("claim on a paused queue: %v; want paused, nothing claimed, the ack applied", c)
	}
	if _, ok := get(t, h, string(next[0].Kv.Key)); ok {
		t.Fatalf("job %s acked while paused is still there", next[0].Kv.Key)
	}
	var de *dkverr.Error
	req = claimBatch("o4", 1, 1)
	req.GetQueueClaim().Acks = []*dkvpb.QueueAckRequest{ackOf(next[1]), ackOf(next[1])}
	if r := h.one(req); !errors.As(r.Err, &de) || de.Code != dkverr.InvalidInput {
		t.Fatalf("a claim acking one job twice: %v, want InvalidInput", r.Err)
	}
}
