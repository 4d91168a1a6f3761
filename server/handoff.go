package server

import (
	"context"
	"fmt"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// handoffTimeout bounds how long Stop waits for leadership to move: one
// election timeout (raft abandons a transfer that has not finished by
// then), at least 500ms. A live target takes over in a few round trips;
// the bound matters when the chosen member is stopping too.
func (s *Server) handoffTimeout() time.Duration {
	return max(time.Duration(s.cfg.ElectionTicks)*s.cfg.TickInterval, 500*time.Millisecond)
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
	// A leader elected a moment ago has not heard from the others yet
	// (their progress is not recently active): look again every tick
	// until one answers or the bound passes.
	var to, match uint64
	var voters int // other than this one
	var err error
	for {
		to, match, voters, err = s.handoffTarget(ctx)
		if err != nil || to != 0 || voters == 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.cfg.TickInterval):
			continue
		}
		break
	}
	switch {
	case err == nil && voters == 0:
		return // a single voter: nobody to hand over to
	case err != nil:
		s.log.Warn("stopping: leadership not handed over", "err", err)
		return
	case to == 0:
		// Without a reachable voter this leader could commit nothing
		// anyway: stopping it costs the cluster nothing more (the whole
		// cluster is stopping, or the others are already cut off).
		s.log.Info("stopping: leadership not handed over: no other voter is reachable", "waited", time.Since(start).Round(time.Millisecond).String())
		return
	}
	if err := s.node.TransferLeadership(ctx, to); err != nil {
		waited := time.Since(start).Round(time.Millisecond).String()
		if !s.voterActive(to) {
			// The target went away during the transfer: it is
			// stopping too, as when a whole cluster is stopped at once.
			s.log.Info("stopping: leadership not handed over: the chosen member stopped answering", "to", s.memberName(to), "waited", waited)
			return
		}
		s.log.Warn("stopping: leadership not handed over", "to", s.memberName(to), "err", err, "waited", waited)
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
	ms, err := s.sm.Latest().Members()
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

// voterActive says whether this leader still hears from member id (its
// progress is recently active: raft's quorum check clears that flag every
// election timeout for a member that sent nothing).
func (s *Server) voterActive(id uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.handoffTimeout())
	defer cancel()
	active := false
	s.node.Inspect(ctx, func(rn *raft.RawNode) {
		rn.WithProgress(func(pid uint64, _ raft.ProgressType, pr tracker.Progress) {
			if pid == id {
				active = pr.RecentActive
			}
		})
	})
	return active
}

// handoffTarget is the reachable voter other than this member that has
// replicated the most of the log (0 if none), and how many other voters
// there are.
func (s *Server) handoffTarget(ctx context.Context) (to, match uint64, voters int, err error) {
	err = s.node.Inspect(ctx, func(rn *raft.RawNode) {
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
	return to, match, voters, err
}
