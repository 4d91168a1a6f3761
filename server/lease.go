package server

import (
	"context"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Leases, server side (see docs/leases.md):
//
//   - Grant and Revoke are ordinary proposals.
//   - A keep-alive, received by any member, is made durable before it is
//     acknowledged: the member's renewer group-commits all keep-alives
//     waiting at that moment into one LeaseRenew entry (at most one in
//     flight per member), and answers each once that entry is applied.
//   - The leader's lessor tracks deadlines; leaseLoop proposes a
//     LeaseExpire per expired lease and, in batches, LeaseCheckpoints of
//     leases whose remaining TTL was last recorded LeaseCheckpointInterval
//     ago or more.

const (
	// maxExpiriesInFlight bounds concurrent LeaseExpire proposals.
	maxExpiriesInFlight = 64
	// maxCheckpointBatch bounds the leases in one LeaseCheckpoint entry.
	maxCheckpointBatch = 10000
	// maxRenewBatch bounds the leases one keep-alive request may name.
	maxRenewBatch = 20000
	// leaseProposeTimeout bounds the loop's and the renewer's proposals.
	leaseProposeTimeout = 5 * time.Second
)

// loadLeases fills the lessor from the state.
func (s *Server) loadLeases() error {
	var recs []lease.Record
	if err := lease.List(s.store.DB(), func(r lease.Record) bool { recs = append(recs, r); return true }); err != nil {
		return err
	}
	s.lessor.Reset(recs)
	return nil
}

// leaseLoop follows leadership and, on the leader, proposes expiries and
// checkpoints.
func (s *Server) leaseLoop() {
	defer s.wg.Done()
	tick := s.cfg.LeaseTick
	t := time.NewTicker(tick)
	defer t.Stop()
	sem := make(chan struct{}, maxExpiriesInFlight)
	var cpInFlight sync.WaitGroup
	cpBusy := false
	cpDone := make(chan struct{}, 1)
	defer cpInFlight.Wait()
	for {
		select {
		case <-s.stopc:
			return
		case <-s.node.LeaderChanged():
		case <-cpDone:
			cpBusy = false
		case <-t.C:
		}
		if s.node.Status().IsLeader {
			s.lessor.Promote()
		} else {
			s.lessor.Demote()
			continue
		}
		for _, ex := range s.lessor.Expired(cap(sem) - len(sem)) {
			sem <- struct{}{}
			s.wg.Add(1)
			go func(ex lease.Expiry) {
				defer s.wg.Done()
				defer func() { <-sem }()
				ctx, cancel := s.leaseCtx()
				defer cancel()
				_, err := propose[*dkvpb.LeaseExpireResponse](ctx, s, &dkvpb.InternalRequest{
					Request: &dkvpb.InternalRequest_LeaseExpire{LeaseExpire: &dkvpb.LeaseExpireRequest{Id: ex.ID, Epoch: ex.Epoch}},
				})
				if err != nil {
					s.lessor.ExpireFailed(ex.ID)
					return
				}
				s.log.Debug("lease expired", "lease", ex.ID, "epoch", ex.Epoch)
			}(ex)
		}
		if cpBusy {
			continue
		}
		cps := s.lessor.Checkpoints(maxCheckpointBatch)
		if len(cps) == 0 {
			continue
		}
		cpBusy = true
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
}

// leaseCtx is a proposal context for the lease loop and the renewer
// (Propose itself returns at Stop).
func (s *Server) leaseCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), leaseProposeTimeout)
}

// renewer group-commits keep-alives: callers add lease ids to the open
// batch; one proposal at a time carries a whole batch.
type renewer struct {
	s    *Server
	mu   sync.Mutex
	cur  *renewBatch
	kick chan struct{}
}

type renewBatch struct {
	ids  []int64
	idx  map[int64]int
	done chan struct{}
	ttls []int64 // per ids[i]; 0: not found
	err  error
}

func newRenewer(s *Server) *renewer { return &renewer{s: s, kick: make(chan struct{}, 1)} }

// renew renews ids and returns each one's TTL in ms (0: not found), once
// the renewal is applied on this member.
func (r *renewer) renew(ctx context.Context, ids []int64) ([]int64, error) {
	r.mu.Lock()
	b := r.cur
	if b == nil {
		b = &renewBatch{idx: map[int64]int{}, done: make(chan struct{})}
		r.cur = b
	}
	for _, id := range ids {
		if _, ok := b.idx[id]; !ok {
			b.idx[id] = len(b.ids)
			b.ids = append(b.ids, id)
		}
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, wireErr(ctx.Err())
	case <-r.s.stopc:
		return nil, dkverr.New(dkverr.Unavailable, "node is shutting down")
	}
	if b.err != nil {
		return nil, b.err
	}
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = b.ttls[b.idx[id]]
	}
	return out, nil
}

func (r *renewer) loop() {
	defer r.s.wg.Done()
	for {
		select {
		case <-r.s.stopc:
			return
		case <-r.kick:
		}
		for {
			r.mu.Lock()
			b := r.cur
			r.cur = nil
			r.mu.Unlock()
			if b == nil {
				break
			}
			resp, err := r.propose(b.ids)
			if err == nil && len(resp.GetTtlMs()) != len(b.ids) {
				err = dkverr.New(dkverr.Internal, "renew answered %d leases, asked %d", len(resp.GetTtlMs()), len(b.ids))
			}
			b.err = err
			if err == nil {
				b.ttls = resp.GetTtlMs()
			}
			close(b.done)
		}
	}
}

// renewAttempt bounds one attempt to commit a renewal. A renewal normally
// commits in one raft round; an attempt that takes longer was most likely
// forwarded to a leader that died, and raft does not report such a loss.
const renewAttempt = time.Second

// propose commits a renewal, retrying on a leader change or after
// renewAttempt (renewing twice is harmless), for up to leaseProposeTimeout:
// a member that forwarded a renewal to a dead leader must not sit on its
// clients' keep-alives until their leases run out.
func (r *renewer) propose(ids []int64) (*dkvpb.LeaseRenewResponse, error) {
	ctx, cancel := r.s.leaseCtx()
	defer cancel()
	req := &dkvpb.LeaseRenewRequest{Ids: ids}
	for {
		changed := r.s.node.LeaderChanged()
		actx, acancel := context.WithTimeout(ctx, renewAttempt)
		go func() {
			select {
			case <-changed:
				acancel()
			case <-actx.Done():
			}
		}()
		resp, err := propose[*dkvpb.LeaseRenewResponse](actx, r.s, &dkvpb.InternalRequest{
			Request: &dkvpb.InternalRequest_LeaseRenew{LeaseRenew: req},
		})
		acancel()
		if err == nil || ctx.Err() != nil || dkverr.CodeOf(err) != dkverr.Unavailable && !isUnknown(err) {
			return resp, err
		}
		select {
		case <-r.s.stopc:
			return nil, err
		default:
		}
	}
}

func isUnknown(err error) bool {
	return status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Canceled
}

// leaseService implements dkvpb.LeaseServer.
type leaseService struct {
	dkvpb.UnimplementedLeaseServer
	s *Server
}

func (l *leaseService) Grant(ctx context.Context, req *dkvpb.LeaseGrantRequest) (*dkvpb.LeaseGrantResponse, error) {
	resp, err := propose[*dkvpb.LeaseGrantResponse](ctx, l.s, &dkvpb.InternalRequest{
		Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: req},
	})
	if err != nil {
		return nil, err
	}
	l.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	return resp, nil
}

func (l *leaseService) Revoke(ctx context.Context, req *dkvpb.LeaseRevokeRequest) (*dkvpb.LeaseRevokeResponse, error) {
	resp, err := propose[*dkvpb.LeaseRevokeResponse](ctx, l.s, &dkvpb.InternalRequest{
		Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: req},
	})
	if err != nil {
		return nil, err
	}
	l.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	return resp, nil
}

func validIDs(ids []int64) error {
	if len(ids) == 0 {
		return dkverr.New(dkverr.InvalidInput, "keep-alive names no lease")
	}
	if len(ids) > maxRenewBatch {
		return dkverr.New(dkverr.InvalidInput, "keep-alive names %d leases; the limit per request is %d", len(ids), maxRenewBatch)
	}
	for _, id := range ids {
		if id <= 0 {
			return dkverr.New(dkverr.InvalidInput, "lease id is %d; it must be positive", id)
		}
	}
	return nil
}

func (l *leaseService) KeepAliveOnce(ctx context.Context, req *dkvpb.LeaseKeepAliveOnceRequest) (*dkvpb.LeaseKeepAliveOnceResponse, error) {
	if err := validIDs([]int64{req.GetId()}); err != nil {
		return nil, err
	}
	ttls, err := l.s.renewer.renew(ctx, []int64{req.GetId()})
	if err != nil {
		return nil, err
	}
	if ttls[0] == 0 {
		return nil, lease.NotFound(req.GetId())
	}
	resp := &dkvpb.LeaseKeepAliveOnceResponse{Id: req.GetId(), TtlMs: ttls[0]}
	l.s.fillHeader(&resp.Header, 0)
	return resp, nil
}

// KeepAlive serves a keep-alive stream. Requests are renewed concurrently
// (each joins the member's next renew batch), so one slow round does not
// hold up the stream. A failed renewal (no leader within the timeout) or
// this member shutting down ends the stream with Unavailable at once, so
// the client reconnects to another member well within its TTL.
func (l *leaseService) KeepAlive(stream dkvpb.Lease_KeepAliveServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var (
		sendMu sync.Mutex
		wg     sync.WaitGroup
	)
	defer wg.Wait()
	failc := make(chan error, 1)
	fail := func(err error) {
		select {
		case failc <- err:
		default:
		}
		cancel()
	}
	reqs := make(chan *dkvpb.LeaseKeepAliveRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case err := <-failc:
			return err
		case <-recvErr:
			return nil // the client closed its side, or the stream broke
		case <-l.s.stopc:
			return dkverr.New(dkverr.Unavailable, "member is shutting down")
		case req := <-reqs:
			if err := validIDs(req.GetIds()); err != nil {
				return err
			}
			wg.Add(1)
			go func(ids []int64) {
				defer wg.Done()
				ttls, err := l.s.renewer.renew(ctx, ids)
				if err != nil {
					fail(err)
					return
				}
				resp := &dkvpb.LeaseKeepAliveResponse{Results: make([]*dkvpb.LeaseKeepAliveResult, len(ids))}
				for i, id := range ids {
					resp.Results[i] = &dkvpb.LeaseKeepAliveResult{Id: id, TtlMs: ttls[i], NotFound: ttls[i] == 0}
				}
				l.s.fillHeader(&resp.Header, 0)
				sendMu.Lock()
				err = stream.Send(resp)
				sendMu.Unlock()
				if err != nil {
					fail(err)
				}
			}(req.GetIds())
		}
	}
}

func (l *leaseService) TimeToLive(ctx context.Context, req *dkvpb.LeaseTimeToLiveRequest) (*dkvpb.LeaseTimeToLiveResponse, error) {
	if req.GetId() <= 0 {
		return nil, dkverr.New(dkverr.InvalidInput, "lease id is %d; it must be positive", req.GetId())
	}
	if err := l.s.node.WaitLinearizable(ctx); err != nil {
		return nil, wireErr(err)
	}
	db := l.s.store.DB()
	rec, ok, err := lease.Get(db, req.GetId())
	if err != nil {
		return nil, wireErr(err)
	}
	if !ok {
		return nil, lease.NotFound(req.GetId())
	}
	resp := &dkvpb.LeaseTimeToLiveResponse{Id: rec.ID, GrantedTtlMs: rec.TTLMs}
	if _, rem, ok := l.s.lessor.Remaining(rec.ID); ok {
		resp.RemainingMs = rem.Milliseconds()
	}
	if req.GetKeys() {
		if err := lease.Keys(db, rec.ID, func(k []byte) bool {
			resp.Keys = append(resp.Keys, append([]byte(nil), k...))
			return true
		}); err != nil {
			return nil, wireErr(err)
		}
	}
	l.s.fillHeader(&resp.Header, 0)
	return resp, nil
}

func (l *leaseService) Leases(ctx context.Context, req *dkvpb.LeaseLeasesRequest) (*dkvpb.LeaseLeasesResponse, error) {
	if err := l.s.node.WaitLinearizable(ctx); err != nil {
		return nil, wireErr(err)
	}
	resp := &dkvpb.LeaseLeasesResponse{}
	if err := lease.List(l.s.store.DB(), func(r lease.Record) bool {
		resp.Leases = append(resp.Leases, &dkvpb.LeaseStatus{Id: r.ID, GrantedTtlMs: r.TTLMs})
		return true
	}); err != nil {
		return nil, wireErr(err)
	}
	l.s.fillHeader(&resp.Header, 0)
	return resp, nil
}
