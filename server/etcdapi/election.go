package etcdapi

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// electionServer is etcd's v3election service: clientv3 concurrency's
// election, kept in this server's KV with its layout (a candidate is
// the key name/<lease in hex>, valued with its proposal; the leader is
// the candidate with the lowest create revision), so candidates through
// this service and through clientv3's concurrency.Election (etcdctl
// elect) take part in one election.
type electionServer struct {
	v3electionpb.UnimplementedElectionServer
	c *selfConn
}

// etcd's election errors, with its texts.
var (
	errElectionNoLeader  = status.Error(codes.NotFound, "election: no leader")
	errElectionNotLeader = status.Error(codes.FailedPrecondition, "election: not leader")
	errMissingLeaderKey  = status.Error(codes.InvalidArgument, `"leader" field must be provided`)
)

func putOp(key, val []byte, lease int64) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: key, Value: val, Lease: lease}}}
}

func createdAt(key []byte, rev int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Key: key, Target: etcdserverpb.Compare_CREATE, Result: etcdserverpb.Compare_EQUAL,
		TargetUnion: &etcdserverpb.Compare_CreateRevision{CreateRevision: rev}}
}

// Campaign waits until the caller leads the election: its key is the
// oldest under name/. A lease already campaigning keeps its place and
// has its value replaced.
func (e *electionServer) Campaign(ctx context.Context, r *v3electionpb.CampaignRequest) (*v3electionpb.CampaignResponse, error) {
	if len(r.Name) == 0 {
		return nil, status.Error(codes.InvalidArgument, etcdPrefix+"election name is empty")
	}
	octx, err := e.c.ctx(ctx)
	if err != nil {
		return nil, err
	}
	lease, err := e.c.leaseOrGrant(octx, r.Lease)
	if err != nil {
		return nil, err
	}
	pfx := append(append([]byte{}, r.Name...), '/')
	key := keyFor(r.Name, lease)
	tctx, cancel := detached(octx)
	t, err := e.c.kv.Txn(tctx, &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{createdAt(key, 0)},
		Success: []*etcdserverpb.RequestOp{putOp(key, r.Value, lease)},
		Failure: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{Key: key}}}},
	})
	cancel()
	if err != nil {
		return nil, err
	}
	leader := &v3electionpb.LeaderKey{Name: r.Name, Key: key, Rev: t.Header.Revision, Lease: lease}
	if !t.Succeeded {
		kv := t.Responses[0].GetResponseRange().Kvs[0]
		leader.Rev = kv.CreateRevision
	}
	if ctx.Err() != nil {
		// The caller left while the candidacy was being created: it
		// never learns the key, so withdraw it, as a cancel while
		// waiting does.
		e.resign(context.WithoutCancel(octx), leader)
		return nil, ctxErr(ctx.Err())
	}
	if !t.Succeeded {
		kv := t.Responses[0].GetResponseRange().Kvs[0]
		if string(kv.Value) != string(r.Value) {
			if _, err := e.proclaim(octx, leader, r.Value); err != nil {
				e.resign(context.WithoutCancel(octx), leader)
				return nil, err
			}
		}
	}
	if _, err := e.c.waitDeletes(octx, pfx, leader.Rev-1); err != nil {
		if ctx.Err() != nil {
			e.resign(context.WithoutCancel(octx), leader) // withdraw the candidacy
		}
		return nil, ctxErr(err)
	}
	return &v3electionpb.CampaignResponse{Header: t.Header, Leader: leader}, nil
}

func (e *electionServer) proclaim(ctx context.Context, l *v3electionpb.LeaderKey, val []byte) (*etcdserverpb.ResponseHeader, error) {
	t, err := e.c.kv.Txn(ctx, &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{createdAt(l.Key, l.Rev)},
		Success: []*etcdserverpb.RequestOp{putOp(l.Key, val, l.Lease)},
	})
	if err != nil {
		return nil, err
	}
	if !t.Succeeded {
		return nil, errElectionNotLeader
	}
	return t.Header, nil
}

// resign deletes the leader's key if it is still the one campaigned
// with; best effort, bounded.
func (e *electionServer) resign(ctx context.Context, l *v3electionpb.LeaderKey) (*etcdserverpb.ResponseHeader, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, err := e.c.kv.Txn(ctx, &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{createdAt(l.Key, l.Rev)},
		Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: l.Key}}}},
	})
	if err != nil {
		return nil, err
	}
	return t.Header, nil
}

// Proclaim sets the leader's value, refused with "election: not leader"
// unless the key is still the one Campaign created.
func (e *electionServer) Proclaim(ctx context.Context, r *v3electionpb.ProclaimRequest) (*v3electionpb.ProclaimResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	octx, err := e.c.ctx(ctx)
	if err != nil {
		return nil, err
	}
	h, err := e.proclaim(octx, r.Leader, r.Value)
	if err != nil {
		return nil, err
	}
	return &v3electionpb.ProclaimResponse{Header: h}, nil
}

// Resign gives up leadership (or a candidacy); a key that is no longer
// the one campaigned with is left alone, without an error, as etcd.
func (e *electionServer) Resign(ctx context.Context, r *v3electionpb.ResignRequest) (*v3electionpb.ResignResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	octx, err := e.c.ctx(ctx)
	if err != nil {
		return nil, err
	}
	h, err := e.resign(octx, r.Leader)
	if err != nil {
		return nil, err
	}
	return &v3electionpb.ResignResponse{Header: h}, nil
}

func (e *electionServer) Leader(ctx context.Context, r *v3electionpb.LeaderRequest) (*v3electionpb.LeaderResponse, error) {
	octx, err := e.c.ctx(ctx)
	if err != nil {
		return nil, err
	}
	kv, h, err := e.c.first(octx, append(append([]byte{}, r.Name...), '/'))
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, errElectionNoLeader
	}
	return &v3electionpb.LeaderResponse{Header: h, Kv: kv}, nil
}

// Observe streams the leader: the current one (or the first to come),
// then each value it proclaims, then, once it is gone, the next leader.
func (e *electionServer) Observe(r *v3electionpb.LeaderRequest, stream v3electionpb.Election_ObserveServer) error {
	ctx := stream.Context()
	octx, err := e.c.ctx(ctx)
	if err != nil {
		return err
	}
	pfx := append(append([]byte{}, r.Name...), '/')
	for {
		kv, h, err := e.c.first(octx, pfx)
		if err != nil {
			return err
		}
		if kv == nil {
			// No leader: wait for the first candidate.
			err = e.c.watch(octx, pfx, prefixEnd(pfx), h.Revision+1, func(ev *mvccpb.Event, wh *etcdserverpb.ResponseHeader) (bool, error) {
				if ev.Type != mvccpb.PUT {
					return false, nil
				}
				kv, h = ev.Kv, &etcdserverpb.ResponseHeader{ClusterId: wh.ClusterId, MemberId: wh.MemberId, Revision: ev.Kv.ModRevision, RaftTerm: wh.RaftTerm}
				return true, nil
			})
			if err != nil {
				return ctxErr(err)
			}
		}
		if err := stream.Send(&v3electionpb.LeaderResponse{Header: h, Kv: kv}); err != nil {
			return err
		}
		// Follow this leader's proclamations until its key is deleted.
		err = e.c.watch(octx, kv.Key, nil, h.Revision+1, func(ev *mvccpb.Event, wh *etcdserverpb.ResponseHeader) (bool, error) {
			if ev.Type == mvccpb.DELETE {
				return true, nil
			}
			return false, stream.Send(&v3electionpb.LeaderResponse{Header: wh, Kv: ev.Kv})
		})
		if err != nil {
			return ctxErr(err)
		}
	}
}
