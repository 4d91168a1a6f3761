package mvcc

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
)

// Lease commands. Lease records live under s/l (package lease); they are
// written here, in the same batch as the keys they attach or delete, so a
// put to a lease and the lease's revocation are atomic with respect to each
// other. Grant, renewal and checkpoint change no key and so no revision;
// a revocation that deletes keys is one revision with one Delete event per
// key.

// ValidateLeaseGrant checks a lease grant's structure.
func ValidateLeaseGrant(g *dkvpb.LeaseGrantRequest) error {
	if g == nil {
		return invalid("lease grant request is empty")
	}
	if err := checkNonNegative("lease id", g.Id); err != nil {
		return err
	}
	return lease.ValidateTTL("ttl_ms", g.TtlMs)
}

// ValidateLeaseID checks the lease id a revocation or an expiry names.
func ValidateLeaseID(id int64) error { return checkLeaseID(id) }

// ValidateLeaseRenew checks a grouped renewal's structure.
func ValidateLeaseRenew(r *dkvpb.LeaseRenewRequest) error {
	ids := r.GetIds()
	if len(ids) == 0 {
		return invalid("lease renew names no lease")
	}
	if u := r.GetUsers(); len(u) != 0 && len(u) != len(ids) {
		return invalid("lease renew names %d leases and %d users", len(ids), len(u))
	}
	for _, id := range ids {
		if err := checkLeaseID(id); err != nil {
			return err
		}
	}
	return nil
}

// ValidateLeaseCheckpoint checks a checkpoint's structure.
func ValidateLeaseCheckpoint(r *dkvpb.LeaseCheckpointRequest) error {
	for _, c := range r.GetCheckpoints() {
		if err := checkLeaseID(c.GetId()); err != nil {
			return err
		}
		if err := checkNonNegative("remaining_ms", c.GetRemainingMs()); err != nil {
			return err
		}
	}
	return nil
}

func checkLeaseID(id int64) error {
	if id <= 0 {
		return invalid("lease id is %d; it must be positive", id)
	}
	return nil
}

// validateTTLPut checks a put's ttl_ms.
func validateTTLPut(p *dkvpb.PutRequest) error {
	if p.TtlMs == 0 {
		return nil
	}
	if p.Lease != 0 {
		return invalid("ttl_ms and lease are exclusive: a put with ttl_ms gets a fresh lease")
	}
	if p.IgnoreValue {
		return invalid("ttl_ms cannot be combined with ignore_value")
	}
	return lease.ValidateTTL("ttl_ms", p.TtlMs)
}

func (w *Writer) getLease(id int64) (lease.Record, bool) {
	rec, ok := w.s.leaseRecs[id]
	return rec, ok
}

// setLease writes rec to the lease table and to the Store's copy.
func (w *Writer) setLease(rec *lease.Record) {
	must(lease.Set(w.b, rec))
	w.s.leaseRecs[rec.ID] = *rec
}

// deleteLease removes lease id's record from the table and the copy.
func (w *Writer) deleteLease(id int64) {
	must(lease.Delete(w.b, id))
	delete(w.s.leaseRecs, id)
}

// mayUse reports whether user may renew, revoke or attach to rec (see
// SetCaller and lease.MayUse).
func (w *Writer) mayUse(user string, rec *lease.Record) bool {
	if w.isRoot == nil {
		return true
	}
	return lease.MayUse(user, user != "" && w.isRoot(user), rec.Owner)
}

// checkLease refuses a write that attaches a key (or a lock) to a lease
// that does not exist or that the caller does not own.
func (w *Writer) checkLease(id int64) error {
	if id == 0 {
		return nil
	}
	rec, ok := w.getLease(id)
	if !ok {
		return lease.NotFound(id)
	}
	if !w.mayUse(w.user, &rec) {
		return lease.Denied(w.user, id, rec.Owner, "attach a key or a lock to")
	}
	return nil
}

// grant writes a new lease, owned by the caller when auth is enabled.
func (w *Writer) grant(id, ttlMs int64, auto bool) int64 {
	if id == 0 {
		var err error
		id, err = lease.AllocID(w.b)
		must(err)
	}
	rec := lease.Record{ID: id, TTLMs: ttlMs, RemainingMs: ttlMs, Epoch: 1, Auto: auto}
	if w.isRoot != nil {
		rec.Owner = w.user
	}
	w.setLease(&rec)
	w.leases = append(w.leases, lease.Change{Kind: lease.Granted, ID: id, TTLMs: ttlMs, RemainingMs: ttlMs, Epoch: 1})
	return id
}

// LeaseGrant applies a lease grant.
func (w *Writer) LeaseGrant(g *dkvpb.LeaseGrantRequest) (*dkvpb.LeaseGrantResponse, error) {
	if g.Id != 0 {
		if _, ok := w.getLease(g.Id); ok {
			return nil, dkverr.New(dkverr.Conflict, "lease %d already exists", g.Id)
		}
	}
	id := w.grant(g.Id, g.TtlMs, false)
	return &dkvpb.LeaseGrantResponse{Id: id, TtlMs: g.TtlMs}, nil
}

// LeaseRevoke applies a client's lease revocation: only the lease's owner
// or root may revoke it.
func (w *Writer) LeaseRevoke(id int64) (*dkvpb.LeaseRevokeResponse, error) {
	if rec, ok := w.getLease(id); ok && !w.mayUse(w.user, &rec) {
		return nil, lease.Denied(w.user, id, rec.Owner, "revoke")
	}
	return w.leaseRevoke(id)
}

// leaseRevoke deletes the lease and then its keys, at one revision (none
// if it had no keys).
func (w *Writer) leaseRevoke(id int64) (*dkvpb.LeaseRevokeResponse, error) {
	if _, ok := w.getLease(id); !ok {
		return nil, lease.NotFound(id)
	}
	// The record goes first, so detaching the keys below does not also
	// try to drop an auto lease.
	w.deleteLease(id)
	w.leases = append(w.leases, lease.Change{Kind: lease.Revoked, ID: id})
	w.locksOnLeaseRevoked(id)
	var keys [][]byte
	must(lease.Keys(w.b, id, func(k []byte) bool {
		keys = append(keys, append([]byte(nil), k...))
		return true
	}))
	for _, k := range keys {
		prev, ok := w.get(k)
		if !ok || prev.lease != id {
			// The index and the key disagree: repair the index rather than
			// delete a key that is not the lease's.
			must(lease.Detach(w.b, id, k))
			continue
		}
		w.writeDelete(k, prev.kv(k))
	}
	return &dkvpb.LeaseRevokeResponse{}, nil
}

// LeaseRenew applies a renewal (a keep-alive batch). Each lease is renewed
// only for its owner or root (users[i] is who asked for ids[i]); the
// others are reported denied.
func (w *Writer) LeaseRenew(r *dkvpb.LeaseRenewRequest) *dkvpb.LeaseRenewResponse {
	resp := &dkvpb.LeaseRenewResponse{TtlMs: make([]int64, len(r.Ids))}
	for i, id := range r.Ids {
		rec, ok := w.getLease(id)
		if !ok {
			continue
		}
		if len(r.Users) == len(r.Ids) && !w.mayUse(r.Users[i], &rec) {
			if resp.Denied == nil {
				resp.Denied = make([]bool, len(r.Ids))
			}
			resp.Denied[i] = true
			continue
		}
		rec.Epoch++
		rec.RemainingMs = rec.TTLMs
		w.setLease(&rec)
		resp.TtlMs[i] = rec.TTLMs
		w.leases = append(w.leases, lease.Change{Kind: lease.Renewed, ID: id, TTLMs: rec.TTLMs, RemainingMs: rec.TTLMs, Epoch: rec.Epoch})
	}
	return resp
}

// LeaseCheckpoint applies the leader's checkpoint of remaining TTLs.
func (w *Writer) LeaseCheckpoint(r *dkvpb.LeaseCheckpointRequest) *dkvpb.LeaseCheckpointResponse {
	for _, c := range r.Checkpoints {
		rec, ok := w.getLease(c.Id)
		if !ok || rec.Epoch != c.Epoch {
			continue // gone, or renewed since the leader measured it
		}
		rec.RemainingMs = min(c.RemainingMs, rec.TTLMs)
		w.setLease(&rec)
		w.leases = append(w.leases, lease.Change{Kind: lease.Checkpointed, ID: c.Id, TTLMs: rec.TTLMs, RemainingMs: rec.RemainingMs, Epoch: rec.Epoch})
	}
	return &dkvpb.LeaseCheckpointResponse{}
}

// LeaseExpire applies the leader's expiry of a lease: it revokes the
// lease if it was not renewed since.
func (w *Writer) LeaseExpire(r *dkvpb.LeaseExpireRequest) *dkvpb.LeaseExpireResponse {
	rec, ok := w.getLease(r.Id)
	if !ok || rec.Epoch != r.Epoch {
		return &dkvpb.LeaseExpireResponse{}
	}
	_, err := w.leaseRevoke(r.Id)
	must(err)
	return &dkvpb.LeaseExpireResponse{Expired: true}
}

// relink moves key's lease attachment from old to new. A key leaving an
// auto lease (one a put with ttl_ms granted) that has no other key drops
// that lease: nobody holds its id, so it would only wait to expire.
func (w *Writer) relink(key []byte, old, new int64) {
	if old == new {
		return
	}
	if old != 0 {
		must(lease.Detach(w.b, old, key))
		if rec, ok := w.getLease(old); ok && rec.Auto {
			has, err := lease.HasKeys(w.b, old)
			must(err)
			if !has {
				w.deleteLease(old)
				w.leases = append(w.leases, lease.Change{Kind: lease.Revoked, ID: old})
			}
		}
	}
	if new != 0 {
		must(lease.Attach(w.b, new, key))
	}
}
