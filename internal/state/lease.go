package state

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/lock"
	"github.com/dkv-io/dkv/internal/mvcc"
	"google.golang.org/protobuf/proto"
)

// The lease commands, applied by the MVCC engine in the same batch as the
// keys they attach or delete. Renewals, checkpoints and expiries are the
// members' own bookkeeping (the leader decides, with the time in the
// entry); grants and revocations come from clients.

var leaseGrantCommand = Command{
	name: "lease_grant",
	validate: func(req *dkvpb.InternalRequest, _ mvcc.Limits) error {
		return mvcc.ValidateLeaseGrant(req.GetLeaseGrant())
	},
	checked: true,
	// Lease ids and TTLs reveal no key.
	needs:     anyUser,
	growsData: always,
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LeaseGrant(req.GetLeaseGrant())
	},
}

var leaseRevokeCommand = Command{
	name: "lease_revoke",
	validate: func(req *dkvpb.InternalRequest, _ mvcc.Limits) error {
		return mvcc.ValidateLeaseID(req.GetLeaseRevoke().GetId())
	},
	checked: true,
	// Revoking deletes every key attached to the lease and releases every
	// lock it holds.
	needs: func(msg proto.Message, st LocalState) ([]Need, error) {
		return LeaseKeyNeeds(st, msg.(*dkvpb.LeaseRevokeRequest).GetId(), auth.Write, "lease revoke")
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LeaseRevoke(req.GetLeaseRevoke().GetId())
	},
}

var leaseRenewCommand = Command{
	name: "lease_renew",
	validate: func(req *dkvpb.InternalRequest, _ mvcc.Limits) error {
		return mvcc.ValidateLeaseRenew(req.GetLeaseRenew())
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LeaseRenew(req.GetLeaseRenew()), nil
	},
}

var leaseCheckpointCommand = Command{
	name: "lease_checkpoint",
	validate: func(req *dkvpb.InternalRequest, _ mvcc.Limits) error {
		return mvcc.ValidateLeaseCheckpoint(req.GetLeaseCheckpoint())
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LeaseCheckpoint(req.GetLeaseCheckpoint()), nil
	},
}

var leaseExpireCommand = Command{
	name: "lease_expire",
	validate: func(req *dkvpb.InternalRequest, _ mvcc.Limits) error {
		return mvcc.ValidateLeaseID(req.GetLeaseExpire().GetId())
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.LeaseExpire(req.GetLeaseExpire()), nil
	},
}

// LeaseKeyNeeds is what a request on lease id needs on the lease's keys,
// read from st: perm on every key attached to the lease and, for a
// write (a revocation deletes and releases them), on every key whose lock
// it holds. With read it is what TimeToLive with keys needs, so it
// reveals no key the caller may not read (CVE-2023-32082).
func LeaseKeyNeeds(st LocalState, id int64, perm auth.Perm, what string) ([]Need, error) {
	var n []Need
	if err := st.LeaseKeys(id, func(k []byte) bool {
		n = append(n, Need{perm, auth.Key(append([]byte(nil), k...)), what + " (attached key)"})
		return true
	}); err != nil {
		return nil, err
	}
	if perm == auth.Write {
		lks, err := st.LeaseLocks(id)
		if err != nil {
			return nil, err
		}
		for _, k := range lks {
			n = append(n, Need{auth.Write, auth.Key(k), what + " (held lock)"})
		}
	}
	return n, nil
}

// DBState is the LocalState of the applied state in db. (A pointer
// conversion: asking costs the auth check no allocation.)
func DBState(db *pebble.DB) LocalState { return (*dbState)(db) }

type dbState pebble.DB

func (s *dbState) LeaseKeys(id int64, fn func(key []byte) bool) error {
	return lease.Keys((*pebble.DB)(s), id, fn)
}

func (s *dbState) LeaseLocks(id int64) ([][]byte, error) {
	return lock.LeaseKeys((*pebble.DB)(s), id)
}
