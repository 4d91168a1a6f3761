package etcdapi

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lockServer is etcd's v3lock service: clientv3 concurrency's mutex,
// kept in this server's KV. A lock on name is the key name/<lease in hex>
// attached to the caller's lease; it is held by the key with the lowest
// create revision under name/, and a waiter waits for the keys created
// before its own to be deleted. This is the layout clientv3's
// concurrency.Mutex (and etcdctl lock) uses, so both exclude each other
// on the same name. It is not DKV's own Lock service (fenced, queued in
// the state machine): the two do not see each other's locks.
type lockServer struct {
	v3lockpb.UnimplementedLockServer
	c *selfConn
}

// errSessionExpired: the caller's key went away (its lease expired or
// was revoked) while it waited.
var errSessionExpired = status.Error(codes.FailedPrecondition, "session expired: the lock's lease ended while waiting")

func (l *lockServer) Lock(ctx context.Context, r *v3lockpb.LockRequest) (*v3lockpb.LockResponse, error) {
	if len(r.Name) == 0 {
		return nil, status.Error(codes.InvalidArgument, etcdPrefix+"lock name is empty")
	}
	octx, err := l.c.ctx(ctx)
	if err != nil {
		return nil, err
	}
	lease, err := l.c.leaseOrGrant(octx, r.Lease)
	if err != nil {
		return nil, err
	}
	pfx := append(append([]byte{}, r.Name...), '/')
	key := keyFor(r.Name, lease)
	// Queue up: create the key unless this lease already has it.
	tctx, cancel := detached(octx)
	t, err := l.c.kv.Txn(tctx, &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{{Key: key, Target: etcdserverpb.Compare_CREATE, Result: etcdserverpb.Compare_EQUAL,
			TargetUnion: &etcdserverpb.Compare_CreateRevision{CreateRevision: 0}}},
		Success: []*etcdserverpb.RequestOp{
			{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: key, Lease: lease}}},
			{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: firstCreate(pfx)}},
		},
		Failure: []*etcdserverpb.RequestOp{
			{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{Key: key}}},
			{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: firstCreate(pfx)}},
		},
	})
	cancel()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// The caller left while its key was being created: it never
		// learns the key, so take it out of the queue (or give the
		// lock back) rather than leave it until the lease ends.
		l.leave(octx, key)
		return nil, ctxErr(ctx.Err())
	}
	myRev := t.Header.Revision
	if !t.Succeeded {
		myRev = t.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	hdr := t.Header
	if owner := t.Responses[1].GetResponseRange().Kvs; len(owner) > 0 && owner[0].CreateRevision == myRev {
		return &v3lockpb.LockResponse{Header: hdr, Key: key}, nil
	}
	wh, err := l.c.waitDeletes(octx, pfx, myRev-1)
	if err != nil {
		l.leave(octx, key)
		return nil, ctxErr(err)
	}
	// The lease may have ended while waiting: then the key is gone.
	g, err := l.c.kv.Range(octx, &etcdserverpb.RangeRequest{Key: key})
	if err != nil {
		return nil, err
	}
	if len(g.Kvs) == 0 {
		return nil, errSessionExpired
	}
	if wh != nil {
		hdr = wh
	}
	return &v3lockpb.LockResponse{Header: hdr, Key: key}, nil
}

// leave deletes a waiter's key, bounded, for a caller whose context may
// be gone already.
func (l *lockServer) leave(ctx context.Context, key []byte) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	l.c.kv.DeleteRange(dctx, &etcdserverpb.DeleteRangeRequest{Key: key})
}

// Unlock deletes the key Lock returned (any key: as etcd's, it does not
// check that the key is a lock).
func (l *lockServer) Unlock(ctx context.Context, r *v3lockpb.UnlockRequest) (*v3lockpb.UnlockResponse, error) {
	octx, err := l.c.ctx(ctx)
	if err != nil {
		return nil, err
	}
	d, err := l.c.kv.DeleteRange(octx, &etcdserverpb.DeleteRangeRequest{Key: r.Key})
	if err != nil {
		return nil, err
	}
	return &v3lockpb.UnlockResponse{Header: d.Header}, nil
}
