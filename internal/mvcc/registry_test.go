package mvcc_test

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/state"
)

// The package's tests apply commands through package state's registry
// (apply_test.go says why this is a separate file).
func init() {
	mvcc.ApplyCommand = func(s *mvcc.Store, b *pebble.Batch, req *dkvpb.InternalRequest) mvcc.Result {
		r := state.ApplyTo(s, b, req)
		return mvcc.Result{Resp: r.Resp, Err: r.Err, Events: r.Effects.Events, Revision: r.Revision,
			Leases: r.Effects.Leases, Locks: r.Effects.Locks}
	}
	mvcc.ValidateCommand = state.Validate
}
