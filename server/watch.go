package server

import (
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/watch"
)

// The Watch service is in grpcapi/watch.go; the hub is the node's.

// startWatch creates the watch hub; it runs until the node stops. It must
// run before raft applies anything, so the hub starts at the revision the
// store was opened with.
func (s *Server) startWatch() {
	s.watchHub = watch.New(s.store.DB(), s.kv.Revision(), watch.Config{
		Logger: s.log,
		Header: func(rev int64) *dkvpb.ResponseHeader {
			return s.fillHeader(&dkvpb.ResponseHeader{Revision: rev})
		},
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-s.stopc
		s.watchHub.Close()
	}()
}

// WatchHub is the node's watch hub (for tests and metrics).
func (s *Server) WatchHub() *watch.Hub { return s.watchHub }

// publishWatch hands the events of a committed apply batch to the hub. It
// runs where the batch was applied (the apply goroutine; the Ready loop
// for a batch holding a conf change) and only queues.
func (s *Server) publishWatch(results []state.Result) {
	if s.watchHub == nil {
		return
	}
	var revs []watch.Revision
	for _, res := range results {
		if len(res.Effects.Events) == 0 {
			continue
		}
		revs = append(revs, watch.Revision{Rev: res.Revision, Events: res.Effects.Events})
	}
	if len(revs) == 0 {
		return // the revision only moves with events
	}
	s.watchHub.Publish(revs[len(revs)-1].Rev, revs)
}

// leaderGrace is how long a watch stream stays open on a node without a
// leader before it ends with Unavailable, so clients move to a node that
// has one (a partitioned node would otherwise look merely quiet).
func (s *Server) leaderGrace() time.Duration {
	return 3 * time.Duration(s.cfg.ElectionTicks) * s.cfg.TickInterval
}

// watchRecvStarted counts a Watch stream's receive goroutine, which
// creates watches (reading the store) and can outlive its handler: stop
// waits for it before closing the store. It returns the func to call
// when the goroutine ends.
func (s *Server) watchRecvStarted() func() {
	s.watchRecv.Add(1)
	return s.watchRecv.Done
}
