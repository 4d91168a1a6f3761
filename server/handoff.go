package server

import (
	"context"
	"fmt"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/state"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// handoffTimeout bounds how long Stop waits for leadership to move: two
// election timeouts (a transfer that has not finished by then raft
// abandons anyway), at least a second.
func (s *Server) handoffTimeout() time.Duration {
	return max(2*time.Duration(s.cfg.ElectionTicks)*s.cfg.TickInterval, time.Second)
}

// handOffLeadership moves leadership, if this member holds it, to the
// voter that has replicated the most of the log, before Stop closes the
// listeners: without it the cluster has no leader from the moment this
// member goes silent until the others' election timeout fires (a second
// or more of refused writes), and every write pending here ends with an
// unknown outcome. While the transfer runs raft refuses new proposals
// here, which the proposal path retries once the new leader is known.
// The wait is bounded (handoffTimeout); if it fails, Stop goes on and the
// others elect a leader as after a crash.
func (s *Server) handOffLeadership() {
	if !s.node.Status().IsLeader {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.handoffTimeout())
	defer cancel()
	var to, match uint64
	voters := 0 // other than this one
	err := s.node.Inspect(ctx, func(rn *raft.RawNode) {
		rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id == s.memberID || pr.IsLearner {
				return
			}
			voters++
			if !pr.RecentActive {
				return
			}
			if to == 0 || pr.Match > match {
				to, match = id, pr.Match
			}
		})
	})
	switch {
	case err == nil && voters == 0:
		return // a single voter: nobody to hand over to
	case err != nil:
		s.log.Warn("stopping: leadership not handed over", "err", err)
		return
	case to == 0:
		s.log.Warn("stopping: leadership not handed over: no other voter is reachable")
		return
	}
	if err := s.node.TransferLeadership(ctx, to); err != nil {
		s.log.Warn("stopping: leadership not handed over", "to", s.memberName(to), "err", err, "waited", time.Since(start).Round(time.Millisecond).String())
		return
	}
	s.log.Info("stopping: leadership handed over", "to", s.memberName(to), "match_index", match, "took", time.Since(start).Round(time.Millisecond).String())
}

// memberName is the name of member id in the member table, or its id in
// hex.
func (s *Server) memberName(id uint64) string {
	if m, err := s.memberRecordByID(id); err == nil && m != nil && m.GetName() != "" {
		return m.GetName()
	}
	return fmt.Sprintf("%x", id)
}

func (s *Server) memberRecordByID(id uint64) (*dkvpb.Member, error) {
	ms, err := state.Members(s.store.DB())
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.GetId() == id {
			return m, nil
		}
	}
	return nil, nil
}
