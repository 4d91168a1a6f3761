package server

import (
	"context"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/lease"
)

// loadLeases fills the lessor from the state.
func (s *Server) loadLeases() error {
	var recs []lease.Record
	if err := s.sm.Latest().Leases(func(r lease.Record) bool { recs = append(recs, r); return true }); err != nil {
		return err
	}
	s.lessor.Reset(recs)
	return nil
}

// leaseLoop follows leadership and, on the leader, proposes expiries and
// checkpoints. It ticks only while this member leads and holds leases: a
// follower, or a leader with no lease, has nothing to expire or record
// and sleeps until leadership changes or a lease is added.
func (s *Server) leaseLoop() {
	defer s.wg.Done()
	tick := s.cfg.LeaseTick
	t := time.NewTicker(tick)
	t.Stop()
	defer t.Stop()
	ticking := false
	sem := make(chan struct{}, maxExpiriesInFlight)
	var cpInFlight sync.WaitGroup
	cpBusy := false
	cpDone := make(chan struct{}, 1)
	defer cpInFlight.Wait()
	var promoted uint64 // the lessor generation last sent to catch up
	for {
		// The channel before the status: a change after this read closes it.
		changed := s.node.LeaderChanged()
		leader := s.node.Status().IsLeader
		if leader {
			if gen := s.lessor.Promote(); gen != promoted {
				promoted = gen
				s.wg.Add(1)
				go s.leaseCatchUp(gen)
			}
		} else {
			s.lessor.Demote()
		}
		if want := leader && s.lessor.Len() > 0; want != ticking {
			if want {
				t.Reset(tick)
			} else {
				t.Stop()
			}
			ticking = want
		}
		if leader {
			s.leaseRound(sem, &cpInFlight, &cpBusy, cpDone)
		}
		select {
		case <-s.stopc:
			return
		case <-changed:
		case <-s.lessor.Added():
		case <-cpDone:
			cpBusy = false
		case <-t.C:
		}
	}
}

// leaseCatchUp tells the lessor, promoted as generation gen, once this
// member has applied everything committed before its term: a ReadIndex on
// a leader is answered only after it committed an entry of its own term.
// Until then the lessor covers every record it applies with the renew
// window (lease.Lessor.CaughtUp). It gives up when leadership moves on.
func (s *Server) leaseCatchUp(gen uint64) {
	defer s.wg.Done()
	for {
		changed := s.node.LeaderChanged()
		ctx, cancel := s.leaseCtx()
		err := s.node.WaitLinearizable(ctx)
		cancel()
		if err == nil {
			s.lessor.CaughtUp(gen)
			return
		}
		select {
		case <-s.stopc:
			return
		case <-changed:
			return // a new promotion, if any, starts its own
		case <-time.After(s.cfg.LeaseTick):
		}
	}
}

// leaseRound proposes the expiries that are due and, unless one is in
// flight, a batch of checkpoints.
func (s *Server) leaseRound(sem chan struct{}, cpInFlight *sync.WaitGroup, cpBusy *bool, cpDone chan struct{}) {
	for _, ex := range s.lessor.Expired(cap(sem) - len(sem)) {
		sem <- struct{}{}
		s.wg.Add(1)
		go func(ex lease.Expiry) {
			defer s.wg.Done()
			defer func() { <-sem }()
			ctx, cancel := s.leaseCtx()
			defer cancel()
			_, err := propose[*dkvpb.LeaseExpireResponse](ctx, s, &dkvpb.InternalRequest{
				TimeUnixNano: time.Now().UnixNano(), // a lock handed to a waiter records it
				Request:      &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: ex.ID, Epoch: ex.Epoch}},
			})
			if err != nil {
				s.lessor.ExpireFailed(ex.ID)
				return
			}
			s.log.Debug("lease expired", "lease", ex.ID, "epoch", ex.Epoch)
		}(ex)
	}
	if *cpBusy {
		return
	}
	cps := s.lessor.Checkpoints(maxCheckpointBatch)
	if len(cps) == 0 {
		return
	}
	*cpBusy = true
	cpInFlight.Add(1)
	go func() {
		defer cpInFlight.Done()
		defer func() { cpDone <- struct{}{} }()
		req := &dkvpb.LeaseCheckpointRequest{Checkpoints: make([]*dkvpb.LeaseCheckpoint, len(cps))}
		for i, c := range cps {
			req.Checkpoints[i] = &dkvpb.LeaseCheckpoint{Id: c.ID, Epoch: c.Epoch, RemainingMs: c.RemainingMs}
		}
		ctx, cancel := s.leaseCtx()
		defer cancel()
		if _, err := propose[*dkvpb.LeaseCheckpointResponse](ctx, s, &dkvpb.InternalRequest{
			Request: &dkvpb.InternalRequest_LeaseCheckpoint{LeaseCheckpoint: req},
		}); err != nil {
			s.lessor.CheckpointFailed(cps)
			s.log.Debug("lease checkpoint failed", "leases", len(cps), "err", err)
		}
	}()
}

// leaseCtx is a proposal context for the lease loop and the renewer
// (Propose itself returns at Stop).
func (s *Server) leaseCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), leaseProposeTimeout)
}
