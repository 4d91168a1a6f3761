package etcdapi

import (
	"context"
	"errors"
	"io"
	"sync"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/lease"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// leaseServer is etcd's Lease service over DKV's. Lease ids are DKV's:
// a lease granted through either API is the same lease. etcd counts TTLs
// in seconds, DKV in milliseconds.
type leaseServer struct {
	etcdserverpb.UnimplementedLeaseServer
	d Deps
}

func (l *leaseServer) LeaseGrant(ctx context.Context, r *etcdserverpb.LeaseGrantRequest) (*etcdserverpb.LeaseGrantResponse, error) {
	ttl := r.TTL
	if ttl < lease.MinTTLMs/1000 {
		ttl = lease.MinTTLMs / 1000 // etcd raises a short TTL to its minimum
	}
	if ttl > lease.MaxTTLMs/1000 {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	if r.ID < 0 {
		return nil, rpctypes.ErrGRPCLeaseNotFound
	}
	req := &dkvpb.LeaseGrantRequest{TtlMs: ttl * 1000, Id: r.ID}
	resp, err := unary(ctx, l.d, dkvpb.Lease_Grant_FullMethodName, req, func(ctx context.Context) (*dkvpb.LeaseGrantResponse, error) {
		return l.d.Lease.Grant(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.LeaseGrantResponse{Header: toHeader(resp.GetHeader()), ID: resp.GetId(), TTL: resp.GetTtlMs() / 1000}, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *etcdserverpb.LeaseRevokeRequest) (*etcdserverpb.LeaseRevokeResponse, error) {
	req := &dkvpb.LeaseRevokeRequest{Id: r.ID}
	resp, err := unary(ctx, l.d, dkvpb.Lease_Revoke_FullMethodName, req, func(ctx context.Context) (*dkvpb.LeaseRevokeResponse, error) {
		return l.d.Lease.Revoke(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.LeaseRevokeResponse{Header: toHeader(resp.GetHeader())}, nil
}

// LeaseKeepAlive renews each lease the client names and answers each
// with its TTL, 0 when the lease does not exist (as etcd). Renewals run
// concurrently (up to maxKeepAlivesInFlight per stream), so that one
// client keeping many leases alive on one stream, as clientv3 does, has
// them group-committed by the server's renewer rather than renewed one
// raft round after another; responses go out as renewals complete.
func (l *leaseServer) LeaseKeepAlive(stream etcdserverpb.Lease_LeaseKeepAliveServer) error {
	if err := l.d.requireLeader(stream.Context()); err != nil {
		return err
	}
	err := l.d.Stream(nil, stream, dkvpb.Lease_KeepAlive_FullMethodName, func(_ any, ss grpc.ServerStream) error {
		ctx, cancel := context.WithCancelCause(ss.Context())
		defer cancel(nil)
		var (
			wg     sync.WaitGroup
			sendMu sync.Mutex
			slots  = make(chan struct{}, maxKeepAlivesInFlight)
		)
		defer wg.Wait()
		renew := func(id int64) {
			defer func() { <-slots; wg.Done() }()
			out := &etcdserverpb.LeaseKeepAliveResponse{ID: id}
			resp, err := l.d.Lease.KeepAliveOnce(ctx, &dkvpb.LeaseKeepAliveOnceRequest{Id: id})
			switch {
			case err == nil:
				out.Header, out.TTL = toHeader(resp.GetHeader()), resp.GetTtlMs()/1000
			case dkverr.CodeOf(err) == dkverr.LeaseNotFound || dkverr.CodeOf(err) == dkverr.InvalidInput:
				out.Header = toHeader(l.d.Header())
			default:
				cancel(err)
				return
			}
			sendMu.Lock()
			err = stream.Send(out)
			sendMu.Unlock()
			if err != nil {
				cancel(err)
			}
		}
		// Recv runs apart so that a failed renewal ends the stream at
		// once; it returns when the handler does.
		reqs := make(chan int64)
		go func() {
			for {
				r, err := stream.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						err = nil
					}
					close(reqs)
					if err != nil {
						cancel(err)
					}
					return
				}
				select {
				case reqs <- r.ID:
				case <-ctx.Done():
					return
				}
			}
		}()
		for {
			var id int64
			var ok bool
			select {
			case id, ok = <-reqs:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if !ok { // the client closed its side: finish what it asked
				wg.Wait()
				return errOrNil(ctx)
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			wg.Add(1)
			go renew(id)
		}
	})
	return toEtcdErr(err)
}

// errOrNil is why ctx ended, nil if it has not.
func errOrNil(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// maxKeepAlivesInFlight bounds the concurrent renewals of one keep-alive
// stream; a client sending faster waits (gRPC flow control).
const maxKeepAlivesInFlight = 256

// LeaseTimeToLive answers TTL -1 for a lease that does not exist, as
// etcd does, rather than an error.
func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *etcdserverpb.LeaseTimeToLiveRequest) (*etcdserverpb.LeaseTimeToLiveResponse, error) {
	req := &dkvpb.LeaseTimeToLiveRequest{Id: r.ID, Keys: r.Keys}
	resp, err := unary(ctx, l.d, dkvpb.Lease_TimeToLive_FullMethodName, req, func(ctx context.Context) (*dkvpb.LeaseTimeToLiveResponse, error) {
		return l.d.Lease.TimeToLive(ctx, req)
	})
	if errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) {
		return &etcdserverpb.LeaseTimeToLiveResponse{Header: toHeader(l.d.Header()), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.LeaseTimeToLiveResponse{
		Header: toHeader(resp.GetHeader()), ID: resp.GetId(),
		TTL: resp.GetRemainingMs() / 1000, GrantedTTL: resp.GetGrantedTtlMs() / 1000, Keys: resp.GetKeys(),
	}, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, r *etcdserverpb.LeaseLeasesRequest) (*etcdserverpb.LeaseLeasesResponse, error) {
	req := &dkvpb.LeaseLeasesRequest{}
	resp, err := unary(ctx, l.d, dkvpb.Lease_Leases_FullMethodName, req, func(ctx context.Context) (*dkvpb.LeaseLeasesResponse, error) {
		return l.d.Lease.Leases(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	out := &etcdserverpb.LeaseLeasesResponse{Header: toHeader(resp.GetHeader())}
	for _, st := range resp.GetLeases() {
		out.Leases = append(out.Leases, &etcdserverpb.LeaseStatus{ID: st.GetId()})
	}
	return out, nil
}
