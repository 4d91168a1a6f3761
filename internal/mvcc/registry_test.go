package mvcc_test

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/state"
)

// appliers holds one state.Applier per store the tests open.
var appliers sync.Map // *mvcc.Store -> *state.Applier

// The package's tests apply commands through package state's registry
// (apply_test.go says why this is a separate file).
func init() {
	mvcc.ApplyCommand = func(s *mvcc.Store, b *pebble.Batch, req *dkvpb.InternalRequest) mvcc.Result {
		a, ok := appliers.Load(s)
		if !ok {
			a, _ = appliers.LoadOrStore(s, state.NewApplier(s))
		}
		r := a.(*state.Applier).Apply(b, req)
		return mvcc.Result{Resp: r.Resp, Err: r.Err, Events: r.Effects.Events, Revision: r.Revision,
			Leases: r.Effects.Leases, Locks: r.Effects.Locks}
	}
	mvcc.ValidateCommand = state.Validate
}
