package state

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/mvcc"
	"google.golang.org/protobuf/proto"
)

// The lock commands, applied by the MVCC engine against the lock table
// (package lock) in the same batch as the keys the locks guard.

var lockAcquireCommand = Command{
	name: "lock_acquire",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateLockAcquire(req.GetLockAcquire(), l)
	},
	checked: true,
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		return []Need{{auth.Write, auth.Key(msg.(*dkvpb.LockAcquireRequest).GetKey()), "lock acquire"}}, nil
	},
	growsData: always,
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LockAcquire(req.GetLockAcquire())
	},
}

var lockReleaseCommand = Command{
	name: "lock_release",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateLockHandle(req.GetLockRelease().GetHandle(), l)
	},
	checked: true,
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		return []Need{{auth.Write, auth.Key(msg.(*dkvpb.LockReleaseRequest).GetHandle().GetKey()), "lock release"}}, nil
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LockRelease(req.GetLockRelease().GetHandle()), nil
	},
}

var lockCancelCommand = Command{
	name: "lock_cancel",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateLockCancel(req.GetLockCancel(), l)
	},
	checked: true,
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		return []Need{{auth.Write, auth.Key(msg.(*dkvpb.LockCancelRequest).GetKey()), "lock cancel"}}, nil
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LockCancel(req.GetLockCancel()), nil
	},
}
