package state

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/proto"
)

const qprefix = "dkv.queue/q/"

// jobKey is client/recipe's layout: inverted priority, run-at ms, id.
func jobKey(priority int32, runAtMs int64, n int) string {
	p := ^(uint32(priority) ^ 0x80000000)
	return fmt.Sprintf("%sj/%08x%016x%024d", qprefix, p, uint64(runAtMs), n)
}

func claim(owner string, atMs int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{TimeUnixNano: atMs * 1_000_000, Request: &dkvpb.InternalRequest_QueueClaim{QueueClaim: &dkvpb.QueueClaimRequest{
		QueuePrefix: []byte(qprefix), Owner: owner, TtlMs: 30_000}}}
}

func claimed(t *testing.T, r Result) *dkvpb.QueueClaimResponse {
	t.Helper()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.Resp.(*dkvpb.QueueClaimResponse)
}

func claimedKey(t *testing.T, r Result) string {
	t.Helper()
	c := claimed(t, r)
	if !c.Found {
		return ""
	}
	return string(c.Kv.Key)
}

// TestQueueClaimOrder: claims go by priority, then run-at at or before
// the entry's time (not the member's clock), then enqueue order; each
// claim skips jobs already locked, so consumers never get the same job.
func TestQueueClaimOrder(t *testing.T) {
	h := newHarness(t)
	low1, low2 := jobKey(0, 1000, 1), jobKey(0, 1000, 2)
	high := jobKey(5, 1000, 3)
	later := jobKey(9, 50_000, 4) // highest priority, but not yet
	for _, k := range []string{low2, later, low1, high} {
		h.ok(put(k, "payload "+k[len(k)-1:], 0))
	}
	var got []string
	for i := range 4 {
		got = append(got, claimedKey(t, h.one(claim(fmt.Sprint("o", i), 10_000))))
	}
	if want := []string{high, low1, low2, ""}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %q, want %q", got, want)
	}
	c := claimed(t, h.one(claim("o9", 10_000)))
	if c.Found || c.NextRunAtMs != 50_000 || c.LockedUnmarked != 3 {
		t.Fatalf("with the rest locked (no markers) at 10 s: %v; want none, next run-at 50000, 3 locked unmarked", c)
	}
	// At the run-at, the scheduled job is visible.
	r := h.one(claim("o10", 50_000))
	if k := claimedKey(t, r); k != later {
		t.Fatalf("at 50 s claimed %q, want %q", k, later)
	}
	if c := claimed(t, r); string(c.Kv.Value) != "payload 4" || c.Handle.GetToken() <= 0 || string(c.Handle.GetKey()) != later || c.ClaimedUnixNano != 50_000*1_000_000 {
		t.Fatalf("claim response %v: want the job's value and a lock handle on it, decided at the entry's time", c)
	}
	// A retry by the same owner returns its job again, not another.
	h.ok(put(jobKey(0, 0, 5), "x", 0))
	if k := claimedKey(t, h.one(claim("o10", 50_000))); k != later {
		t.Fatalf("retry by the owner claimed %q, want its own %q", k, later)
	}
}

// TestQueueClaimSkipsMarkedAndPaused: a job with a claim marker is
// skipped even unlocked; a paused queue hands nothing out.
func TestQueueClaimSkipsMarkedAndPaused(t *testing.T) {
	h := newHarness(t)
	a, b := jobKey(0, 0, 1), jobKey(0, 0, 2)
	h.ok(put(a, "a", 0))
	h.ok(put(b, "b", 0))
	h.ok(put(qprefix+"c/"+a[len(qprefix)+2:], "{}", 0))
	if k := claimedKey(t, h.one(claim("o1", 1))); k != b {
		t.Fatalf("claimed %q, want %q (the first is marked)", k, b)
	}
	h.ok(put(qprefix+"c/paused", "", 0))
	if c := claimed(t, h.one(claim("o2", 1))); c.Found || !c.Paused {
		t.Fatalf("paused queue: %v", c)
	}
}

// TestQueueClaimFencing: once a claim's lease expires the job is claimed
// again with a larger token, and a delete (an ack) under the old claim is
// refused with Locked.
func TestQueueClaimFencing(t *testing.T) {
	h := newHarness(t)
	k := jobKey(0, 0, 1)
	h.ok(put(k, "v", 0))
	first := claimed(t, h.one(claim("o1", 1)))
	if !first.Found {
		t.Fatal("nothing claimed")
	}
	if c := claimed(t, h.one(claim("o2", 2))); c.Found {
		t.Fatalf("claimed %q while it is locked", c.Kv.Key)
	}
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: first.Handle.Lease, Epoch: 1}}})
	second := claimed(t, h.one(claim("o2", 3)))
	if !second.Found || second.Handle.Token <= first.Handle.Token {
		t.Fatalf("after expiry: %v; want the job again with a token above %d", second, first.Handle.Token)
	}
	stale := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte(k), Lock: first.Handle}}}
	var de *dkverr.Error
	if r := h.one(stale); !errors.As(r.Err, &de) || de.Code != dkverr.Locked {
		t.Fatalf("ack under the expired claim: %v, want Locked", r.Err)
	}
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte(k), Lock: second.Handle}}})
}

// TestQueueClaimDeterminism: the same entries, batched differently, give
// the same claims and byte-identical state.
func TestQueueClaimDeterminism(t *testing.T) {
	var cmds []*dkvpb.InternalRequest
	for i := range 30 {
		cmds = append(cmds, put(jobKey(int32(i%3), int64(i%5)*100, i), fmt.Sprintf(`{"id":"%d","max_attempts":%d}`, i, i%3), 0))
		if i%2 == 1 {
			c := claim(fmt.Sprint("o", i%4), int64(i)*20)
			c.GetQueueClaim().Mark = i%4 == 1
			cmds = append(cmds, c)
		}
		if i%7 == 6 {
			cmds = append(cmds, acquire(jobKey(int32((i+1)%3), int64((i+1)%5)*100, i+1), "other", false))
		}
	}
	cmds = append(cmds, &dkvpb.InternalRequest{TimeUnixNano: 1, Request: &dkvpb.InternalRequest_QueueClaim{QueueClaim: &dkvpb.QueueClaimRequest{
		QueuePrefix: []byte("no-slash"), Owner: "o", TtlMs: 30_000}}})
	a, b := newHarness(t), newHarness(t)
	var ra, rb []Result
	for i := 0; i < len(cmds); i += 5 {
		ra = append(ra, a.batch(clones(cmds[i:min(i+5, len(cmds))])...)...)
	}
	for _, c := range clones(cmds) {
		rb = append(rb, b.one(c))
	}
	found, marked := 0, 0
	for i := range ra {
		if (ra[i].Err == nil) != (rb[i].Err == nil) || ra[i].Revision != rb[i].Revision || (ra[i].Resp != nil && !proto.Equal(ra[i].Resp, rb[i].Resp)) {
			t.Fatalf("command %d (%v) gave %+v and %+v", i, cmds[i], ra[i], rb[i])
		}
		if c, ok := ra[i].Resp.(*dkvpb.QueueClaimResponse); ok && c.Found {
			found++
			if c.Marked {
				marked++
			}
		}
	}
	if found < 10 || marked < 3 {
		t.Fatalf("only %d claims found a job, %d marked; the test exercises little", found, marked)
	}
	var de *dkverr.Error
	if last := ra[len(ra)-1]; !errors.As(last.Err, &de) || de.Code != dkverr.InvalidInput {
		t.Fatalf("prefix without /: %v, want InvalidInput", last.Err)
	}
	if sa, sb := stateContents(t, a.store.DB()), stateContents(t, b.store.DB()); !bytes.Equal(sa, sb) {
		t.Fatalf("states differ:\n%s\n---\n%s", sa, sb)
	}
}

// TestQueueClaimMarks: with mark, the claim counts the attempt in the
// job's JSON and puts the marker on the claim's lease in the same
// command; a job that used its attempts is claimed unmarked.
func TestQueueClaimMarks(t *testing.T) {
	h := newHarness(t)
	k, spent := jobKey(1, 0, 1), jobKey(0, 0, 2)
	h.ok(put(k, `{"id":"x","payload":"cA==","attempt":2,"max_attempts":5}`, 0))
	h.ok(put(spent, `{"id":"y","attempt":5,"max_attempts":5}`, 0))
	req := claim("o1", 1)
	req.GetQueueClaim().Mark = true
	r := h.one(req)
	c := claimed(t, r)
	if !c.Found || !c.Marked || string(c.Kv.Key) != k || !bytes.Contains(c.Kv.Value, []byte(`"attempt":3`)) || c.Kv.ModRevision != r.Revision {
		t.Fatalf("marked claim: %v; want the job written back with attempt 3", c)
	}
	mk := qprefix + "c/" + k[len(qprefix)+2:]
	var marker *dkvpb.KeyValue
	for _, e := range r.Effects.Events {
		if string(e.KV.Key) == mk {
			marker = e.KV
		}
	}
	want := fmt.Sprintf(`{"attempt":3,"owner":"o1","token":%d}`, c.Handle.Token)
	if marker == nil || string(marker.Value) != want || marker.Lease != c.Handle.Lease {
		t.Fatalf("marker %v; want %s on lease %d", marker, want, c.Handle.Lease)
	}
	req = claim("o2", 1)
	req.GetQueueClaim().Mark = true
	if c := claimed(t, h.one(req)); !c.Found || c.Marked || string(c.Kv.Key) != spent {
		t.Fatalf("spent job: %v; want it claimed unmarked", c)
	}
	// Expiry of the claim's lease removes the marker (the watch event
	// that wakes consumers).
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: c.Handle.Lease, Epoch: 1}}})
	if k2 := claimedKey(t, h.one(claim("o3", 2))); k2 != k {
		t.Fatalf("after the claim expired claimed %q, want %q again", k2, k)
	}
}

func ack(h *dkvpb.LockHandle, marker string, puts ...*dkvpb.PutRequest) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_QueueAck{QueueAck: &dkvpb.QueueAckRequest{Handle: h, MarkerKey: []byte(marker), Puts: puts}}}
}

// TestQueueAck: an ack deletes the job and its marker, writes its puts
// and releases the claim in one command; a retry of it succeeds again
// without changing anything; an ack under a claim that expired and was
// taken over is refused with Locked and changes nothing.
func TestQueueAck(t *testing.T) {
	h := newHarness(t)
	a, b := jobKey(0, 0, 1), jobKey(0, 0, 2)
	ma, mb := qprefix+"c/"+a[len(qprefix)+2:], qprefix+"c/"+b[len(qprefix)+2:]
	h.ok(put(a, `{"max_attempts":3}`, 0))
	h.ok(put(b, `{"max_attempts":3}`, 0))
	mark := func(owner string) *dkvpb.QueueClaimResponse {
		req := claim(owner, 1)
		req.GetQueueClaim().Mark = true
		return claimed(t, h.one(req))
	}
	ca := mark("o1")
	dead := &dkvpb.PutRequest{Key: []byte(qprefix + "d/1"), Value: []byte("dead")}
	r := h.ok(ack(ca.Handle, ma, dead))
	var got []string
	for _, e := range r.Effects.Events {
		got = append(got, fmt.Sprint(e.Type, " ", string(e.KV.Key)))
	}
	if want := fmt.Sprint([]string{"DELETE " + a, "DELETE " + ma, "PUT " + qprefix + "d/1"}); fmt.Sprint(got) != want {
		t.Fatalf("ack events %v, want %v", got, want)
	}
	rev := h.m.kv.Revision()
	if r := h.ok(ack(ca.Handle, ma, dead)); !r.Resp.(*dkvpb.QueueAckResponse).Already || h.m.kv.Revision() != rev {
		t.Fatalf("retry of an applied ack: %v (revision %d -> %d); want already, nothing changed", r.Resp, rev, h.m.kv.Revision())
	}
	// The claim was released: the key's lock is free.
	if r := h.ok(acquire(a, "x", false)); !r.Resp.(*dkvpb.LockAcquireResponse).Acquired {
		t.Fatalf("lock after the ack: %v; want it free", r.Resp)
	}
	if r := h.one(ack(ca.Handle, ma, dead)); r.Err == nil {
		t.Fatal("an ack retried after the key was locked again succeeded")
	}

	// b: claimed by o2, expired, claimed by o3; o2's late ack is refused.
	c2 := mark("o2")
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: c2.Handle.Lease, Epoch: 1}}})
	c3 := mark("o3")
	if string(c3.Kv.Key) != b || c3.Handle.Token <= c2.Handle.Token {
		t.Fatalf("reclaim: %v", c3)
	}
	rev = h.m.kv.Revision()
	var de *dkverr.Error
	if r := h.one(ack(c2.Handle, mb)); !errors.As(r.Err, &de) || de.Code != dkverr.Locked || h.m.kv.Revision() != rev {
		t.Fatalf("stale ack: %v; want Locked and nothing changed", r.Err)
	}
	// An expired claim nobody took over is refused too: the job is still there.
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: c3.Handle.Lease, Epoch: 1}}})
	if r := h.one(ack(c3.Handle, mb)); !errors.As(r.Err, &de) || de.Code != dkverr.Locked {
		t.Fatalf("ack after expiry: %v; want Locked", r.Err)
	}
}
