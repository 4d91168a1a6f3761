package server

import (
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/state"
)

// effects turns the state machine's effects into actions: the one place
// the server reacts to applied commands (state.Executor). It runs on the
// apply goroutine and only hands work on.
type effects struct{ s *Server }

var _ state.Executor = effects{}

// LeasesChanged runs at apply time: the time this member learns of a
// lease change is what its lessor counts from (lease.Lessor.Promote).
func (e effects) LeasesChanged(changes []lease.Change) { e.s.lessor.Apply(changes) }

// Committed runs once the batch is durable. The purge is kicked only then,
// so a purge never races a batch that still allows older reads.
func (e effects) Committed(results []state.Result) {
	s := e.s
	for i := range results {
		if results[i].Effects.Purge {
			select {
			case s.purgeKick <- struct{}{}:
			default:
			}
			break
		}
	}
	// Hand the events to the watch hub; it fans out on its own goroutine.
	s.publishWatch(results)
	// Wake Acquire calls whose grant is now applied and durable.
	s.lockWait.notify(results)
}

// Restored runs after a snapshot install, once the machine reloaded.
func (e effects) Restored() error {
	s := e.s
	if err := s.loadLeases(); err != nil {
		return err
	}
	// The state jumped: watchers replay the skipped revisions from history.
	if s.watchHub != nil {
		s.watchHub.Reset(s.kv.Revision())
	}
	return nil
}
