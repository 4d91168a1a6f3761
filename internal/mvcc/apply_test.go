package mvcc

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/lease"
	"google.golang.org/protobuf/proto"
)

// Result is what these tests see of one applied command.
type Result struct {
	Resp     proto.Message
	Err      error
	Events   []Event
	Revision int64
	Leases   []lease.Change
	Locks    []*LockGrant
}

// Apply drives a Writer the way package state does, for this package's
// tests (which cannot import state): the one production dispatch lives in
// internal/state, and its tests check that it reaches every command.
func (s *Store) Apply(b *pebble.Batch, req *dkvpb.InternalRequest) Result {
	w := s.Begin(b)
	if err := ValidateApplied(req); err != nil {
		return Result{Err: err, Revision: w.Revision()}
	}
	var resp proto.Message
	var err error
	switch r := req.Request.(type) {
	case *dkvpb.InternalRequest_Put:
		resp, err = w.Put(r.Put)
	case *dkvpb.InternalRequest_DeleteRange:
		resp, err = w.DeleteRange(r.DeleteRange)
	case *dkvpb.InternalRequest_Txn:
		resp, err = w.Txn(r.Txn)
	case *dkvpb.InternalRequest_Counter:
		resp, err = w.Counter(r.Counter)
	case *dkvpb.InternalRequest_Compact:
		resp, err = w.Compact(r.Compact)
	case *dkvpb.InternalRequest_LeaseGrant:
		resp, err = w.LeaseGrant(r.LeaseGrant)
	case *dkvpb.InternalRequest_LeaseRevoke:
		resp, err = w.LeaseRevoke(r.LeaseRevoke.GetId())
	case *dkvpb.InternalRequest_LeaseRenew:
		resp = w.LeaseRenew(r.LeaseRenew)
	case *dkvpb.InternalRequest_LeaseCheckpoint:
		resp = w.LeaseCheckpoint(r.LeaseCheckpoint)
	case *dkvpb.InternalRequest_LeaseExpire:
		resp = w.LeaseExpire(r.LeaseExpire)
	case *dkvpb.InternalRequest_LockAcquire:
		resp, err = w.LockAcquire(r.LockAcquire)
	case *dkvpb.InternalRequest_LockRelease:
		resp = w.LockRelease(r.LockRelease.GetHandle())
	case *dkvpb.InternalRequest_IndexCreate:
		resp, err = w.IndexCreate(r.IndexCreate)
	case *dkvpb.InternalRequest_IndexDrop:
		resp, err = w.IndexDrop(r.IndexDrop)
	case *dkvpb.InternalRequest_LockCancel:
		resp = w.LockCancel(r.LockCancel)
	default:
		err = invalid("unknown command %T", req.Request)
	}
	if err != nil {
		return Result{Err: err, Revision: w.Revision()}
	}
	rev, ch := w.Finish()
	StampRevision(resp, rev)
	return Result{Resp: resp, Events: ch.Events, Revision: rev, Leases: ch.Leases, Locks: ch.Locks}
}
