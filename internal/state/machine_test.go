package state

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storage"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// recorder is an Executor that records what it was told, and when.
type recorder struct {
	calls     []string // "leases", "committed", "restored", in order
	leases    []lease.Change
	committed [][]Result
}

func (r *recorder) LeasesChanged(ch []lease.Change) {
	r.calls = append(r.calls, "leases")
	r.leases = append(r.leases, ch...)
}

func (r *recorder) Committed(results []Result) {
	r.calls = append(r.calls, "committed")
	r.committed = append(r.committed, results)
}

func (r *recorder) Restored() error {
	r.calls = append(r.calls, "restored")
	return nil
}

type harness struct {
	t     *testing.T
	store *storage.Storage
	m     *Machine
	exec  *recorder
	index uint64
	ids   uint64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return openHarness(t, st)
}

func openHarness(t *testing.T, st *storage.Storage) *harness {
	t.Helper()
	kv, err := mvcc.Open(st.DB(), mvcc.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	exec := &recorder{}
	m, err := New(kv, st, exec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, store: st, m: m, exec: exec}
}

// batch applies reqs as one committed batch, the way raftnode does, and
// returns their results.
func (h *harness) batch(reqs ...*dkvpb.InternalRequest) []Result {
	h.t.Helper()
	b := h.store.DB().NewIndexedBatch()
	defer b.Close()
	var results []Result
	for _, req := range reqs {
		h.ids++
		req.Id = h.ids
		data, err := proto.Marshal(req)
		if err != nil {
			h.t.Fatal(err)
		}
		h.index++
		id, res := h.m.Apply(b, h.index, data)
		if id != req.Id {
			h.t.Fatalf("Apply returned id %d, want %d", id, req.Id)
		}
		results = append(results, res)
	}
	h.m.Committing()
	if err := b.Commit(pebble.NoSync); err != nil {
		h.t.Fatal(err)
	}
	h.m.Committed(h.index, results)
	return results
}

func (h *harness) one(req *dkvpb.InternalRequest) Result {
	h.t.Helper()
	return h.batch(req)[0]
}

func (h *harness) ok(req *dkvpb.InternalRequest) Result {
	h.t.Helper()
	res := h.one(req)
	if res.Err != nil {
		h.t.Fatalf("%v: %v", req, res.Err)
	}
	return res
}

func put(k, v string, lease int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease}}}
}

func del(k string) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte(k)}}}
}

func grant(id, ttl int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: ttl}}}
}

func acquire(k, owner string, wait bool) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockAcquire{LockAcquire: &dkvpb.LockAcquireRequest{Key: []byte(k), Owner: owner, TtlMs: 60_000, Wait: wait}}}
}

func alarm(member uint64, on bool) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{MemberId: member, Active: on, Reason: "disk full"}}}
}

func revOf(r Result) int64 {
	return r.Resp.(interface{ GetHeader() *dkvpb.ResponseHeader }).GetHeader().GetRevision()
}

// TestDispatchEveryCommand applies one of each command and checks the
// typed response and effects each yields.
func TestDispatchEveryCommand(t *testing.T) {
	h := newHarness(t)

	res := h.ok(grant(7, 60_000))
	if r, ok := res.Resp.(*dkvpb.LeaseGrantResponse); !ok || r.Id != 7 {
		t.Fatalf("grant: %#v", res.Resp)
	}
	if len(res.Effects.Leases) != 1 || res.Effects.Leases[0].Kind != lease.Granted || res.Effects.Leases[0].ID != 7 {
		t.Fatalf("grant effects: %+v", res.Effects)
	}

	res = h.ok(put("a", "1", 7)) // an empty store is at revision 1: the first write is 2
	if _, ok := res.Resp.(*dkvpb.PutResponse); !ok || res.Revision != 2 || revOf(res) != 2 {
		t.Fatalf("put: %#v rev %d", res.Resp, res.Revision)
	}
	if ev := res.Effects.Events; len(ev) != 1 || ev[0].Type != mvcc.EventPut || string(ev[0].KV.Key) != "a" || ev[0].KV.Lease != 7 {
		t.Fatalf("put events: %+v", ev)
	}

	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte("t"), Value: []byte("x"), TtlMs: 5000}}})
	if r := res.Resp.(*dkvpb.PutResponse); r.Lease == 0 || len(res.Effects.Leases) != 1 || res.Effects.Leases[0].ID != r.Lease {
		t.Fatalf("put with ttl: %#v effects %+v", r, res.Effects)
	}

	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: &dkvpb.TxnRequest{
		Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte("b"), Value: []byte("2")}}}},
	}}})
	if r, ok := res.Resp.(*dkvpb.TxnResponse); !ok || !r.Succeeded || len(res.Effects.Events) != 1 || revOf(res) != 4 {
		t.Fatalf("txn: %#v effects %+v", res.Resp, res.Effects)
	}

	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: &dkvpb.CounterRequest{Key: []byte("n"), Delta: 3}}})
	if r, ok := res.Resp.(*dkvpb.CounterResponse); !ok || r.Value != 3 {
		t.Fatalf("counter: %#v", res.Resp)
	}

	res = h.ok(del("b"))
	if r, ok := res.Resp.(*dkvpb.DeleteRangeResponse); !ok || r.Deleted != 1 || res.Effects.Events[0].Type != mvcc.EventDelete {
		t.Fatalf("delete: %#v effects %+v", res.Resp, res.Effects)
	}

	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRenew{LeaseRenew: &dkvpb.LeaseRenewRequest{Ids: []int64{7}}}})
	if r, ok := res.Resp.(*dkvpb.LeaseRenewResponse); !ok || r.TtlMs[0] != 60_000 || res.Effects.Leases[0].Kind != lease.Renewed {
		t.Fatalf("renew: %#v effects %+v", res.Resp, res.Effects)
	}
	epoch := res.Effects.Leases[0].Epoch

	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseCheckpoint{LeaseCheckpoint: &dkvpb.LeaseCheckpointRequest{
		Checkpoints: []*dkvpb.LeaseCheckpoint{{Id: 7, Epoch: epoch, RemainingMs: 1000}}}}})
	if _, ok := res.Resp.(*dkvpb.LeaseCheckpointResponse); !ok || res.Effects.Leases[0].Kind != lease.Checkpointed || res.Effects.Leases[0].RemainingMs != 1000 {
		t.Fatalf("checkpoint: %#v effects %+v", res.Resp, res.Effects)
	}

	res = h.ok(acquire("L", "alice", false))
	ar := res.Resp.(*dkvpb.LockAcquireResponse)
	if !ar.Acquired || len(res.Effects.Locks) != 1 || res.Effects.Locks[0].Owner != "alice" {
		t.Fatalf("acquire: %#v effects %+v", ar, res.Effects)
	}
	res = h.ok(acquire("L", "bob", true))
	if r := res.Resp.(*dkvpb.LockAcquireResponse); !r.Queued || len(res.Effects.Locks) != 0 {
		t.Fatalf("queued acquire: %#v effects %+v", r, res.Effects)
	}
	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockRelease{LockRelease: &dkvpb.LockReleaseRequest{Handle: ar.Handle}}})
	if r, ok := res.Resp.(*dkvpb.LockReleaseResponse); !ok || !r.Released || len(res.Effects.Locks) != 1 || res.Effects.Locks[0].Owner != "bob" {
		t.Fatalf("release: %#v effects %+v", res.Resp, res.Effects)
	}
	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockCancel{LockCancel: &dkvpb.LockCancelRequest{Key: []byte("L"), Owner: "bob"}}})
	if r, ok := res.Resp.(*dkvpb.LockCancelResponse); !ok || !r.Released {
		t.Fatalf("cancel: %#v", res.Resp)
	}

	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: 7}}})
	if _, ok := res.Resp.(*dkvpb.LeaseRevokeResponse); !ok || res.Effects.Leases[0].Kind != lease.Revoked ||
		len(res.Effects.Events) != 1 || string(res.Effects.Events[0].KV.Key) != "a" {
		t.Fatalf("revoke: %#v effects %+v", res.Resp, res.Effects)
	}

	h.ok(grant(8, 60_000))
	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: 8, Epoch: 1}}})
	if r, ok := res.Resp.(*dkvpb.LeaseExpireResponse); !ok || !r.Expired || res.Effects.Leases[0].Kind != lease.Revoked {
		t.Fatalf("expire: %#v effects %+v", res.Resp, res.Effects)
	}

	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: &dkvpb.CompactRequest{Revision: 2}}})
	if _, ok := res.Resp.(*dkvpb.CompactResponse); !ok || !res.Effects.Purge {
		t.Fatalf("compact: %#v effects %+v", res.Resp, res.Effects)
	}
	if res := h.one(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: &dkvpb.CompactRequest{Revision: 2}}}); dkverr.CodeOf(res.Err) != dkverr.Compacted || res.Effects.Purge {
		t.Fatalf("repeated compact: err %v purge %v, want Compacted and no purge", res.Err, res.Effects.Purge)
	}

	// Member records: the conf change writes the record, MemberAttrs
	// sets its client URL.
	ctx, _ := proto.Marshal(&dkvpb.ConfChangeContext{Member: &dkvpb.Member{Id: 9, Name: "n9", PeerUrl: "http://p9"}})
	b := h.store.DB().NewIndexedBatch()
	if err := h.m.ApplyConfChange(b, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(9)}}}, ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	res = h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_MemberAttrs{MemberAttrs: &dkvpb.MemberAttrsRequest{Id: 9, ClientUrl: "http://c9"}}})
	if res.Resp != nil {
		t.Fatalf("member attrs response %#v, want none", res.Resp)
	}
	ms, err := Members(h.store.DB())
	if err != nil || len(ms) != 1 || ms[0].Name != "n9" || ms[0].ClientUrl != "http://c9" {
		t.Fatalf("members %v, %v", ms, err)
	}

	// A command that is not one.
	if res := h.one(&dkvpb.InternalRequest{}); dkverr.CodeOf(res.Err) != dkverr.InvalidInput {
		t.Fatalf("empty command: %v, want InvalidInput", res.Err)
	}
}

// TestAlarmRefusesGrowth: an applied alarm refuses, on apply, the writes
// that add data and only those, until it is cleared.
func TestAlarmRefusesGrowth(t *testing.T) {
	h := newHarness(t)
	h.ok(put("a", "1", 0))
	rev := h.m.kv.Revision()
	res := h.one(alarm(3, true))
	if res.Err != nil || res.Resp != nil || res.Revision != rev {
		t.Fatalf("alarm: %+v", res)
	}
	if !h.m.Alarms().Raised(3) || h.m.Alarms().Count() != 1 || h.m.Alarms().Describe() != "member 3: disk full" {
		t.Fatalf("alarm table: raised %v count %d %q", h.m.Alarms().Raised(3), h.m.Alarms().Count(), h.m.Alarms().Describe())
	}
	for _, req := range []*dkvpb.InternalRequest{put("b", "1", 0), grant(1, 5000), acquire("L", "o", false)} {
		res := h.one(req)
		if dkverr.CodeOf(res.Err) != dkverr.NoSpace || res.Revision != rev || len(res.Effects.Leases)+len(res.Effects.Locks)+len(res.Effects.Events) != 0 {
			t.Fatalf("%v under alarm: %+v, want NoSpace and no effects", req, res)
		}
	}
	if res := h.one(del("a")); res.Err != nil || len(res.Effects.Events) != 1 {
		t.Fatalf("delete under alarm: %+v", res)
	}
	// The table is replicated state: a machine opened over it sees it.
	if o := openHarness(t, h.store); !o.m.Alarms().Raised(3) {
		t.Fatal("alarm not loaded from the state")
	}
	h.ok(alarm(3, false))
	if h.m.Alarms().Count() != 0 {
		t.Fatal("alarm not cleared")
	}
	h.ok(put("b", "1", 0))
}

// TestEffectsTiming: lease changes reach the executor at apply time,
// before the batch commits; everything else only once it has.
func TestEffectsTiming(t *testing.T) {
	h := newHarness(t)
	b := h.store.DB().NewIndexedBatch()
	defer b.Close()
	data, _ := proto.Marshal(grant(1, 5000))
	_, g := h.m.Apply(b, 1, data)
	data, _ = proto.Marshal(put("k", "v", 1))
	_, p := h.m.Apply(b, 2, data)
	if fmt.Sprint(h.exec.calls) != "[leases]" || len(h.exec.leases) != 1 {
		t.Fatalf("before commit the executor saw %v %+v, want only the grant's lease change", h.exec.calls, h.exec.leases)
	}
	h.m.Committing()
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	h.m.Committed(2, []Result{g, p})
	if fmt.Sprint(h.exec.calls) != "[leases committed]" || len(h.exec.committed[0]) != 2 || len(h.exec.committed[0][1].Effects.Events) != 1 {
		t.Fatalf("executor saw %v", h.exec.calls)
	}
	// Undecodable bytes are skipped alike everywhere: no id, no effects.
	if id, res := h.m.Apply(b, 3, []byte{0xff, 0xff}); id != 0 || res.Resp != nil || res.Err != nil {
		t.Fatalf("undecodable entry: id %d %+v", id, res)
	}
	if err := h.m.Restored(); err != nil || h.exec.calls[len(h.exec.calls)-1] != "restored" {
		t.Fatalf("Restored: %v, calls %v", err, h.exec.calls)
	}
}

// randomCommands is a reproducible mix of every kind of command,
// including ones that are refused.
func randomCommands(seed uint64, n int) []*dkvpb.InternalRequest {
	r := rand.New(rand.NewPCG(seed, seed))
	key := func() string { return fmt.Sprintf("k%d", r.IntN(8)) }
	var out []*dkvpb.InternalRequest
	now := int64(1e9)
	for range n {
		var req *dkvpb.InternalRequest
		now += int64(r.IntN(400)) * 1e6
		switch r.IntN(16) {
		case 0, 1, 2:
			req = put(key(), fmt.Sprint(r.IntN(100)), int64(r.IntN(4)))
		case 3:
			req = del(key())
		case 4:
			req = grant(int64(r.IntN(4)), 1000+int64(r.IntN(5000)))
		case 5:
			req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: 1 + int64(r.IntN(3))}}}
		case 6:
			req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: &dkvpb.CounterRequest{Key: []byte("ctr"), Delta: int64(r.IntN(5))}}}
		case 7:
			req = acquire("L"+fmt.Sprint(r.IntN(2)), fmt.Sprint("o", r.IntN(3)), r.IntN(2) == 0)
		case 8:
			req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LockCancel{LockCancel: &dkvpb.LockCancelRequest{Key: []byte("L" + fmt.Sprint(r.IntN(2))), Owner: fmt.Sprint("o", r.IntN(3))}}}
		case 9:
			req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: &dkvpb.TxnRequest{
				Compare: []*dkvpb.Compare{{Key: []byte(key()), Target: dkvpb.Compare_VERSION, Result: dkvpb.Compare_GREATER, TargetUnion: &dkvpb.Compare_Version{Version: 0}}},
				Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte(key()), Value: []byte("t")}}}},
				Failure: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte("k"), Prefix: true}}}},
			}}}
		case 10:
			req = alarm(uint64(1+r.IntN(2)), r.IntN(2) == 0)
		case 11:
			req = &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: 1 + int64(r.IntN(3)), Epoch: 1}}}
		case 12:
			req = rateLimit("b"+fmt.Sprint(r.IntN(2)), 1+int64(r.IntN(3)), int64(r.IntN(1000))*1_000_000)
		case 13:
			req = &dkvpb.InternalRequest{TimeUnixNano: now, Request: &dkvpb.InternalRequest_SessionOpen{
				SessionOpen: &dkvpb.SessionOpenRequest{Id: 1 + uint64(r.IntN(2)), TtlMs: 1000 + int64(r.IntN(9000))}}}
		case 14:
			// Writes in a session, sequences repeated and out of order.
			seq := 1 + uint64(r.IntN(8))
			req = &dkvpb.InternalRequest{TimeUnixNano: now, Session: &dkvpb.ClientSession{Id: 1 + uint64(r.IntN(2)), Seq: seq, Acked: 1 + uint64(r.IntN(int(seq)))},
				Request: &dkvpb.InternalRequest_Counter{Counter: &dkvpb.CounterRequest{Key: []byte("sctr"), Delta: 1}}}
		case 15:
			req = &dkvpb.InternalRequest{TimeUnixNano: now, Request: &dkvpb.InternalRequest_SessionExpire{
				SessionExpire: &dkvpb.SessionExpireRequest{Ids: []uint64{1 + uint64(r.IntN(2))}}}}
		}
		out = append(out, req)
	}
	return out
}

func stateContents(t *testing.T, db *pebble.DB) []byte {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: keys.StateStart, UpperBound: keys.StateEnd})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out bytes.Buffer
	for it.First(); it.Valid(); it.Next() {
		fmt.Fprintf(&out, "%q=%q\n", it.Key(), it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestDeterminism: two fresh machines applying the same entries, batched
// differently, end with byte-identical state and the same results.
func TestDeterminism(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	cmds := randomCommands(seed, 400)
	a, b := newHarness(t), newHarness(t)
	var ra, rb []Result
	for i := 0; i < len(cmds); i += 7 {
		ra = append(ra, a.batch(clones(cmds[i:min(i+7, len(cmds))])...)...)
	}
	for _, c := range clones(cmds) {
		rb = append(rb, b.one(c))
	}
	applied := 0
	for i := range ra {
		if (ra[i].Err == nil) != (rb[i].Err == nil) || ra[i].Revision != rb[i].Revision ||
			(ra[i].Resp != nil && !proto.Equal(ra[i].Resp, rb[i].Resp)) || !errors.Is(ra[i].Err, rb[i].Err) && ra[i].Err != nil && ra[i].Err.Error() != rb[i].Err.Error() {
			t.Fatalf("seed %d: command %d (%v) gave %+v and %+v", seed, i, cmds[i], ra[i], rb[i])
		}
		if ra[i].Err == nil {
			applied++
		}
	}
	if applied < len(cmds)/4 {
		t.Fatalf("only %d of %d commands applied; the mix tests little", applied, len(cmds))
	}
	if sa, sb := stateContents(t, a.store.DB()), stateContents(t, b.store.DB()); !bytes.Equal(sa, sb) {
		t.Fatalf("seed %d: states differ:\n%s\n---\n%s", seed, sa, sb)
	}
}

func clones(reqs []*dkvpb.InternalRequest) []*dkvpb.InternalRequest {
	out := make([]*dkvpb.InternalRequest, len(reqs))
	for i, r := range reqs {
		out[i] = proto.Clone(r).(*dkvpb.InternalRequest)
	}
	return out
}

func rateLimit(k string, n, at int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{TimeUnixNano: at, Request: &dkvpb.InternalRequest_RateLimit{RateLimit: &dkvpb.RateLimitRequest{
		Key: []byte(k), Limit: 10, PeriodMs: 1000, Burst: 3, N: n}}}
}

// TestRateLimitApply: decisions in one batch see each other (the batch is
// read through), decide at the entry's time, take no revision, and keep
// their state inside the span a raft snapshot carries.
func TestRateLimitApply(t *testing.T) {
	h := newHarness(t)
	h.ok(put("k", "v", 0))
	rev := h.m.kv.Revision()
	const s = int64(1_000_000_000)
	res := h.batch(rateLimit("b", 2, 5*s), rateLimit("b", 1, 5*s), rateLimit("b", 1, 5*s))
	var got []bool
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		got = append(got, r.Resp.(*dkvpb.RateLimitResponse).GetAllowed())
	}
	if fmt.Sprint(got) != "[true true false]" {
		t.Fatalf("allowed %v, want [true true false]", got)
	}
	if rr := res[2].Resp.(*dkvpb.RateLimitResponse); rr.GetRetryAfterMs() != 100 || rr.GetDecidedUnixNano() != 5*s {
		t.Fatalf("refusal %v: want retry after 100 ms, decided at the entry's time", rr)
	}
	if r := h.m.kv.Revision(); r != rev || revOf(res[0]) != rev {
		t.Fatalf("revision moved from %d to %d (header %d): a decision is no key change", rev, r, revOf(res[0]))
	}
	if !bytes.Contains(stateContents(t, h.store.DB()), []byte(`"s/bt/b"=`)) {
		t.Fatal("the bucket's state is not in the replicated span")
	}
	// A bad request is refused at apply too, naming the limit.
	bad := rateLimit("b", 4, 6*s)
	var de *dkverr.Error
	if r := h.one(bad); !errors.As(r.Err, &de) || de.Code != dkverr.InvalidInput || !bytes.Contains([]byte(r.Err.Error()), []byte("burst, 3")) {
		t.Fatalf("n over burst: got %v, want InvalidInput naming the burst", r.Err)
	}
}
