package server

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/state"
)

// layoutInterval is how often the leader checks whether the keyspace can
// move to mvcc.LayoutValueOnce.
const layoutInterval = 250 * time.Millisecond

// layoutLoop runs on every member and proposes only while leader: once
// every member in the member table has published a version that reads
// mvcc.LayoutValueOnce, it proposes the layout change (the cluster
// version gate of storage layout 3). Until then it says, once per
// blocking member, which member holds it back. A member whose keyspace
// is in layout 3 has nothing left to do.
func (s *Server) layoutLoop() {
	defer s.wg.Done()
	t := time.NewTicker(layoutInterval)
	defer t.Stop()
	// Stopping the server ends a proposal under way.
	stopCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		select {
		case <-s.stopc:
			stop()
		case <-stopCtx.Done():
		}
	}()
	var blocker string
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
		}
		if s.kv.Layout() >= mvcc.LayoutValueOnce {
			return
		}
		if !s.node.Status().IsLeader {
			continue
		}
		ms, err := s.sm.Latest().Members()
		if err != nil {
			continue
		}
		if m := state.LayoutBlocker(ms); m != nil {
			if who := m.GetName() + " " + m.GetVersion(); who != blocker {
				blocker = who
				s.log.Info("storage layout 3 (each value written once) waits until every member runs dkv 0.3 or later",
					"waiting_for", m.GetName(), "its_version", m.GetVersion())
			}
			continue
		}
		ctx, cancel := context.WithTimeout(stopCtx, 5*time.Second)
		_, err = s.proposeRequest(ctx, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_StorageLayout{
			StorageLayout: &dkvpb.StorageLayoutRequest{Layout: mvcc.LayoutValueOnce}}})
		cancel()
		if err != nil {
			s.log.Warn("proposing storage layout 3 failed; trying again", "err", err)
		}
	}
}

// StorageLayout is the layout of this member's replicated keyspace
// (mvcc.LayoutLatestAndHistory until the cluster moves to
// mvcc.LayoutValueOnce).
func (s *Server) StorageLayout() int { return s.kv.Layout() }
