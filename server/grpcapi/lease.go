package grpcapi

import (
	"context"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keepalive"
	"github.com/dkv-io/dkv/internal/lease"
)

// leaseService implements dkvpb.LeaseServer (docs/leases.md). Grant and
// Revoke are ordinary proposals; a keep-alive is renewed through the
// node's renewer (Node.Renew), which makes it durable before it is
// acknowledged.
type leaseService struct {
	dkvpb.UnimplementedLeaseServer
	n Node
}

func (l *leaseService) Grant(ctx context.Context, req *dkvpb.LeaseGrantRequest) (*dkvpb.LeaseGrantResponse, error) {
	return Propose[*dkvpb.LeaseGrantResponse](ctx, l.n, &dkvpb.InternalRequest{
		Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: req},
	})
}

func (l *leaseService) Revoke(ctx context.Context, req *dkvpb.LeaseRevokeRequest) (*dkvpb.LeaseRevokeResponse, error) {
	return Propose[*dkvpb.LeaseRevokeResponse](ctx, l.n, &dkvpb.InternalRequest{
		TimeUnixNano: time.Now().UnixNano(), // a lock handed to a waiter records it
		Request:      &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: req},
	})
}

func (l *leaseService) KeepAliveOnce(ctx context.Context, req *dkvpb.LeaseKeepAliveOnceRequest) (*dkvpb.LeaseKeepAliveOnceResponse, error) {
	if err := keepalive.ValidIDs([]int64{req.GetId()}); err != nil {
		return nil, err
	}
	ttls, err := l.n.Renew(ctx, []int64{req.GetId()})
	if err != nil {
		return nil, err
	}
	if ttls[0] == 0 {
		return nil, lease.NotFound(req.GetId())
	}
	resp := &dkvpb.LeaseKeepAliveOnceResponse{Id: req.GetId(), TtlMs: ttls[0]}
	resp.Header = l.n.Header(0)
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
		case <-l.n.Stopping():
			return dkverr.New(dkverr.Unavailable, "member is shutting down")
		case req := <-reqs:
			if err := keepalive.ValidIDs(req.GetIds()); err != nil {
				return err
			}
			wg.Add(1)
			go func(ids []int64) {
				defer wg.Done()
				ttls, err := l.n.Renew(ctx, ids)
				if err != nil {
					fail(err)
					return
				}
				resp := &dkvpb.LeaseKeepAliveResponse{Results: make([]*dkvpb.LeaseKeepAliveResult, len(ids))}
				for i, id := range ids {
					resp.Results[i] = &dkvpb.LeaseKeepAliveResult{Id: id, TtlMs: ttls[i], NotFound: ttls[i] == 0}
				}
				resp.Header = l.n.Header(0)
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
	if err := l.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	v, u, err := l.n.RecheckCaller(ctx, req)
	if err != nil {
		return nil, err
	}
	latest := l.n.Applied().Latest()
	rec, ok, err := latest.Lease(req.GetId())
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, lease.NotFound(req.GetId())
	}
	if v.Enabled && u != nil && !lease.MayUse(u.Name, u.Root, rec.Owner) {
		return nil, lease.Denied(u.Name, rec.ID, rec.Owner, "read the time to live of")
	}
	resp := &dkvpb.LeaseTimeToLiveResponse{Id: rec.ID, GrantedTtlMs: rec.TTLMs}
	if rem, ok := l.n.LeaseRemaining(rec.ID); ok {
		resp.RemainingMs = rem.Milliseconds()
	}
	if req.GetKeys() {
		if err := latest.LeaseKeys(rec.ID, func(k []byte) bool {
			resp.Keys = append(resp.Keys, append([]byte(nil), k...))
			return true
		}); err != nil {
			return nil, err
		}
	}
	resp.Header = l.n.Header(0)
	return resp, nil
}

func (l *leaseService) Leases(ctx context.Context, req *dkvpb.LeaseLeasesRequest) (*dkvpb.LeaseLeasesResponse, error) {
	if err := l.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	v, u, err := l.n.RecheckCaller(ctx, req)
	if err != nil {
		return nil, err
	}
	// With auth enabled a caller sees only the leases it granted; root
	// sees all.
	mine := func(lease.Record) bool { return true }
	if v.Enabled {
		mine = func(r lease.Record) bool { return u != nil && lease.MayUse(u.Name, u.Root, r.Owner) }
	}
	resp := &dkvpb.LeaseLeasesResponse{}
	if err := l.n.Applied().Latest().Leases(func(r lease.Record) bool {
		if mine(r) {
			resp.Leases = append(resp.Leases, &dkvpb.LeaseStatus{Id: r.ID, GrantedTtlMs: r.TTLMs})
		}
		return true
	}); err != nil {
		return nil, err
	}
	resp.Header = l.n.Header(0)
	return resp, nil
}
