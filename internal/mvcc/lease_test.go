package mvcc

import (
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
)

func grantReq(id, ttlMs int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: ttlMs}}}
}

func revokeReq(id int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: id}}}
}

func renewReq(ids ...int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRenew{LeaseRenew: &dkvpb.LeaseRenewRequest{Ids: ids}}}
}

func expireReq(id int64, epoch uint64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: id, Epoch: epoch}}}
}

func checkpointReq(cps ...*dkvpb.LeaseCheckpoint) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseCheckpoint{LeaseCheckpoint: &dkvpb.LeaseCheckpointRequest{Checkpoints: cps}}}
}

func (h *harness) lease(id int64) (lease.Record, bool) {
	h.t.Helper()
	r, ok, err := lease.Get(h.db, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r, ok
}

func (h *harness) leaseKeys(id int64) []string {
	h.t.Helper()
	var out []string
	if err := lease.Keys(h.db, id, func(k []byte) bool { out = append(out, string(k)); return true }); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func TestLeaseGrantAttachRevoke(t *testing.T) {
	h := newHarness(t)
	res := h.mustApply(grantReq(0, 5000))
	g := res.Resp.(*dkvpb.LeaseGrantResponse)
	if g.Id != 10 || g.TtlMs != 5000 { // 1-9 are the harness's
		t.Fatalf("grant = %v, want id 10 (first free server id) ttl 5000", g)
	}
	if res.Revision != 1 || len(res.Events) != 0 { // an empty store is at revision 1
		t.Fatalf("a grant changed the keyspace: rev %d events %v", res.Revision, res.Events)
	}
	if len(res.Leases) != 1 || res.Leases[0].Kind != lease.Granted || res.Leases[0].ID != 10 {
		t.Fatalf("changes = %+v", res.Leases)
	}
	wantCode(t, h.apply(grantReq(10, 5000)).Err, dkverr.Conflict)

	h.mustApply(putReq("a", "1", func(p *dkvpb.PutRequest) { p.Lease = 10 }))
	h.mustApply(putReq("b", "1", func(p *dkvpb.PutRequest) { p.Lease = 10 }))
	h.mustApply(putReq("c", "1", func(p *dkvpb.PutRequest) { p.Lease = 10 }))
	h.mustApply(putReq("c", "2")) // moves c off the lease
	h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("b")}))
	if got := h.leaseKeys(10); len(got) != 1 || got[0] != "a" {
		t.Fatalf("lease keys = %v, want [a]", got)
	}
	rev := h.s.Revision()
	res = h.mustApply(revokeReq(10))
	if res.Revision != rev+1 {
		t.Fatalf("revoke at revision %d, want %d", res.Revision, rev+1)
	}
	if len(res.Events) != 1 || res.Events[0].Type != EventDelete || string(res.Events[0].KV.Key) != "a" || res.Events[0].KV.ModRevision != rev+1 {
		t.Fatalf("revoke events = %+v, want one Delete of a", res.Events)
	}
	if h.get("a") != nil || h.get("c") == nil {
		t.Fatal("revoke must delete a and only a")
	}
	if _, ok := h.lease(10); ok {
		t.Fatal("lease record survived its revoke")
	}
	wantCode(t, h.apply(revokeReq(10)).Err, dkverr.LeaseNotFound)
	// A revoked lease cannot take keys, by put, txn or counter.
	wantCode(t, h.apply(putReq("x", "1", func(p *dkvpb.PutRequest) { p.Lease = 10 })).Err, dkverr.LeaseNotFound)
	op := opPut("x", "1")
	op.GetRequestPut().Lease = 10
	wantCode(t, h.apply(txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("y", "1"), op}})).Err, dkverr.LeaseNotFound)
	if h.get("y") != nil {
		t.Fatal("a refused txn wrote y")
	}
	wantCode(t, h.apply(counterReq(&dkvpb.CounterRequest{Key: []byte("n"), Delta: 1, Lease: 10})).Err, dkverr.LeaseNotFound)
	// Revoking a lease without keys changes no revision.
	h.mustApply(grantReq(50, 2000))
	rev = h.s.Revision()
	if res := h.mustApply(revokeReq(50)); res.Revision != rev || len(res.Events) != 0 {
		t.Fatalf("empty revoke: rev %d events %v", res.Revision, res.Events)
	}
	// Server-picked ids are never reused.
	if g := h.mustApply(grantReq(0, 5000)).Resp.(*dkvpb.LeaseGrantResponse); g.Id != 11 {
		t.Fatalf("next id %d, want 11", g.Id)
	}
}

func TestLeaseExpireAndRenewEpochs(t *testing.T) {
	h := newHarness(t)
	h.mustApply(grantReq(20, 3000))
	h.mustApply(putReq("k", "v", func(p *dkvpb.PutRequest) { p.Lease = 20 }))
	res := h.mustApply(renewReq(20, 99))
	if got := res.Resp.(*dkvpb.LeaseRenewResponse).TtlMs; len(got) != 2 || got[0] != 3000 || got[1] != 0 {
		t.Fatalf("renew ttls = %v, want [3000 0]", got)
	}
	rec, _ := h.lease(20)
	if rec.Epoch != 2 {
		t.Fatalf("epoch after renew = %d, want 2", rec.Epoch)
	}
	// A checkpoint or expiry measured before the renewal does nothing.
	h.mustApply(checkpointReq(&dkvpb.LeaseCheckpoint{Id: 20, Epoch: 1, RemainingMs: 10}))
	if rec, _ := h.lease(20); rec.RemainingMs != 3000 {
		t.Fatalf("stale checkpoint applied: %+v", rec)
	}
	if r := h.mustApply(expireReq(20, 1)); r.Resp.(*dkvpb.LeaseExpireResponse).Expired || h.get("k") == nil {
		t.Fatal("stale expiry applied")
	}
	// A current checkpoint records the remaining TTL (capped at the TTL).
	h.mustApply(checkpointReq(&dkvpb.LeaseCheckpoint{Id: 20, Epoch: 2, RemainingMs: 1200}))
	if rec, _ := h.lease(20); rec.RemainingMs != 1200 || rec.Epoch != 2 {
		t.Fatalf("checkpoint: %+v", rec)
	}
	h.mustApply(checkpointReq(&dkvpb.LeaseCheckpoint{Id: 20, Epoch: 2, RemainingMs: 1 << 40}))
	if rec, _ := h.lease(20); rec.RemainingMs != 3000 {
		t.Fatalf("checkpoint above TTL not capped: %+v", rec)
	}
	// A current expiry deletes the keys, one revision, Delete events.
	rev := h.s.Revision()
	r := h.mustApply(expireReq(20, 2))
	if !r.Resp.(*dkvpb.LeaseExpireResponse).Expired || h.get("k") != nil || r.Revision != rev+1 || len(r.Events) != 1 || r.Events[0].Type != EventDelete {
		t.Fatalf("expiry: %+v", r)
	}
	if len(r.Leases) != 1 || r.Leases[0].Kind != lease.Revoked {
		t.Fatalf("expiry changes = %+v", r.Leases)
	}
}

func TestTTLPut(t *testing.T) {
	h := newHarness(t)
	res := h.mustApply(putReq("s", "1", func(p *dkvpb.PutRequest) { p.TtlMs = 2000 }))
	id := res.Resp.(*dkvpb.PutResponse).Lease
	if id == 0 || h.get("s").Lease != id {
		t.Fatalf("ttl put: lease %d, key %v", id, h.get("s"))
	}
	if len(res.Leases) != 1 || res.Leases[0].Kind != lease.Granted || res.Leases[0].TTLMs != 2000 {
		t.Fatalf("ttl put changes = %+v", res.Leases)
	}
	// Rewriting the key with a new TTL drops the first auto lease.
	res = h.mustApply(putReq("s", "2", func(p *dkvpb.PutRequest) { p.TtlMs = 4000 }))
	id2 := res.Resp.(*dkvpb.PutResponse).Lease
	if _, ok := h.lease(id); ok || id2 == id {
		t.Fatalf("old auto lease %d kept (new %d)", id, id2)
	}
	if len(res.Leases) != 2 {
		t.Fatalf("changes = %+v, want a grant and a revoke", res.Leases)
	}
	// Expiry deletes the key like any lease.
	rec, _ := h.lease(id2)
	r := h.mustApply(expireReq(id2, rec.Epoch))
	if h.get("s") != nil || len(r.Events) != 1 || r.Events[0].Type != EventDelete {
		t.Fatalf("ttl key survived expiry: %+v", r)
	}
	// Deleting the key drops its auto lease at once.
	id3 := h.mustApply(putReq("t", "1", func(p *dkvpb.PutRequest) { p.TtlMs = 2000 })).Resp.(*dkvpb.PutResponse).Lease
	h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("t")}))
	if _, ok := h.lease(id3); ok {
		t.Fatal("auto lease outlived its only key")
	}
}

func TestLeaseValidation(t *testing.T) {
	h := newHarness(t)
	for _, req := range []*dkvpb.InternalRequest{
		grantReq(0, 999),
		grantReq(0, lease.MaxTTLMs+1),
		grantReq(-1, 5000),
		revokeReq(0),
		renewReq(),
		renewReq(-3),
		expireReq(0, 1),
		checkpointReq(&dkvpb.LeaseCheckpoint{Id: 1, RemainingMs: -1}),
		putReq("k", "v", func(p *dkvpb.PutRequest) { p.TtlMs = 500 }),
		putReq("k", "v", func(p *dkvpb.PutRequest) { p.TtlMs = 5000; p.Lease = 1 }),
	} {
		wantCode(t, Validate(req, Limits{}), dkverr.InvalidInput)
		wantCode(t, h.apply(req).Err, dkverr.InvalidInput)
	}
	if h.s.Revision() != 1 {
		t.Fatal("refused commands wrote")
	}
}

// TestLeaseDeterminism: replicas applying the same lease commands hold
// identical lease state.
func TestLeaseDeterminism(t *testing.T) {
	h1, h2 := newHarness(t), newHarness(t)
	cmds := []*dkvpb.InternalRequest{
		grantReq(0, 5000),
		putReq("a", "1", func(p *dkvpb.PutRequest) { p.Lease = 10 }),
		putReq("b", "1", func(p *dkvpb.PutRequest) { p.TtlMs = 1000 }),
		renewReq(10, 11),
		checkpointReq(&dkvpb.LeaseCheckpoint{Id: 10, Epoch: 2, RemainingMs: 700}),
		expireReq(11, 1),
		grantReq(0, 9000),
	}
	for _, c := range cmds {
		h1.apply(c)
		h2.apply(c)
	}
	dump := func(h *harness) (out []lease.Record) {
		if err := lease.List(h.db, func(r lease.Record) bool { out = append(out, r); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := dump(h1), dump(h2)
	if len(a) != len(b) || len(a) != 12 { // 11 was renewed, so the expiry of epoch 1 is stale
		t.Fatalf("lease tables differ or wrong size: %v vs %v", a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("lease %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
}

// TestLeaseRecordsAfterReopen: a store opened over a database with leases
// (a restart, a snapshot installed underneath) renews, checkpoints and
// expires them from the records in the database: a renewal after a
// checkpoint restores the full TTL and advances the epoch, a checkpoint or
// an expiry measured before that renewal changes nothing (never shortened,
// never revoked once renewed), and a put may name the lease.
func TestLeaseRecordsAfterReopen(t *testing.T) {
	for _, how := range []string{"open", "reload"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t) // leases 1-9, TTL 60 s, epoch 1
			h.mustApply(checkpointReq(&dkvpb.LeaseCheckpoint{Id: 3, RemainingMs: 10_000, Epoch: 1}))
			switch how {
			case "open":
				s, err := Open(h.db, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				h.s = s
			case "reload":
				fresh := newHarness(t)
				fresh.db = h.db
				if err := fresh.s.Reload(fresh.db); err != nil {
					t.Fatal(err)
				}
				h = fresh
			}
			if err := h.apply(putReq("k", "v", func(p *dkvpb.PutRequest) { p.Lease = 3 })).Err; err != nil {
				t.Fatalf("put with lease 3 after %s: %v", how, err)
			}
			resp := h.mustApply(renewReq(3)).Resp.(*dkvpb.LeaseRenewResponse)
			if len(resp.TtlMs) != 1 || resp.TtlMs[0] != 60_000 {
				t.Fatalf("renew after %s: %v, want TTL 60000", how, resp.TtlMs)
			}
			if rec, ok := h.lease(3); !ok || rec.Epoch != 2 || rec.RemainingMs != 60_000 {
				t.Fatalf("lease 3 after renewal: %+v %v, want epoch 2, remaining 60000", rec, ok)
			}
			h.mustApply(checkpointReq(&dkvpb.LeaseCheckpoint{Id: 3, RemainingMs: 1, Epoch: 1}))
			if rec, _ := h.lease(3); rec.RemainingMs != 60_000 {
				t.Fatalf("a checkpoint measured before the renewal shortened lease 3 to %d ms", rec.RemainingMs)
			}
			if r := h.mustApply(expireReq(3, 1)).Resp.(*dkvpb.LeaseExpireResponse); r.Expired {
				t.Fatal("an expiry measured before the renewal revoked lease 3")
			}
			if r := h.mustApply(expireReq(3, 2)).Resp.(*dkvpb.LeaseExpireResponse); !r.Expired {
				t.Fatal("an expiry of the current epoch did not revoke lease 3")
			}
			if _, ok := h.lease(3); ok {
				t.Fatal("lease 3 still recorded after its expiry")
			}
			if h.get("k") != nil {
				t.Fatal("key k outlived its lease")
			}
		})
	}
}
