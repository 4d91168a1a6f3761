package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// selfConn is the lock and election services' client of this server's
// own etcd KV, Watch and Lease services, as etcd's v3lock and v3election
// are clients of etcd's: each call goes out with the caller's
// credentials, so it is authorized as the caller's KV calls would be.
type selfConn struct {
	dial func(context.Context) (*grpc.ClientConn, error)

	once sync.Once
	err  error
	kv   etcdserverpb.KVClient
	w    etcdserverpb.WatchClient
	l    etcdserverpb.LeaseClient
}

// StoreMetadata is the gRPC metadata key naming a call's store (DKV's
// named stores, docs/data-model.md). The server reads it; it is here so
// that the self calls can carry it on.
const StoreMetadata = "dkv-store"

// forwarded are the incoming metadata keys a self call carries on: the
// caller's token, its store and etcd's require-leader flag. Dropping
// the store would run a lock or a campaign named in store S in the
// default store's keys.
var forwarded = []string{"token", "authorization", StoreMetadata, rpctypes.MetadataRequireLeaderKey}

// ctx is ctx with the caller's credentials as outgoing metadata; it
// fails if the connection cannot be made.
func (c *selfConn) ctx(ctx context.Context) (context.Context, error) {
	c.once.Do(func() {
		if c.dial == nil {
			c.err = status.Error(codes.Unimplemented, etcdPrefix+"this server has no connection to itself for the lock and election services")
			return
		}
		conn, err := c.dial(context.Background())
		if err != nil {
			c.err = status.Errorf(codes.Unavailable, "%sconnect to this server: %v", etcdPrefix, err)
			return
		}
		c.kv, c.w, c.l = etcdserverpb.NewKVClient(conn), etcdserverpb.NewWatchClient(conn), etcdserverpb.NewLeaseClient(conn)
	})
	if c.err != nil {
		return nil, c.err
	}
	in, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for _, k := range forwarded {
		if v := in.Get(k); len(v) > 0 {
			out.Set(k, v...)
		}
	}
	return metadata.NewOutgoingContext(ctx, out), nil
}

// detached is ctx without its cancellation, bounded by createTimeout,
// for the txn that creates a lock waiter's or a candidate's key: a
// caller that cancels while that txn is in flight could otherwise see
// it fail although it committed, and leave behind a key it never
// learns of, holding its place until its lease ends. Run detached, the
// txn's outcome is known, and the caller's cancellation is handled
// after it.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
}

// createTimeout bounds a detached create.
const createTimeout = 10 * time.Second

// sessionTTL is the TTL of the lease a lock or campaign without one is
// given, etcd's session default.
const sessionTTL = 60

// leaseOrGrant is lease, or a new lease of sessionTTL seconds if lease
// is 0, as etcd's lock and election services do (they open a
// concurrency session, which grants one).
func (c *selfConn) leaseOrGrant(ctx context.Context, lease int64) (int64, error) {
	if lease != 0 {
		return lease, nil
	}
	g, err := c.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: sessionTTL})
	if err != nil {
		return 0, err
	}
	return g.ID, nil
}

// keyFor is the key of lease's entry under the name: name/leaseID in
// hex, clientv3 concurrency's layout.
func keyFor(name []byte, lease int64) []byte {
	return fmt.Appendf(append(append([]byte{}, name...), '/'), "%x", lease)
}

// prefixEnd is the range end of every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// first is the oldest (lowest create revision) key under prefix, nil if
// there is none, and the header of the read.
func (c *selfConn) first(ctx context.Context, prefix []byte) (*mvccpb.KeyValue, *etcdserverpb.ResponseHeader, error) {
	r, err := c.kv.Range(ctx, firstCreate(prefix))
	if err != nil {
		return nil, nil, err
	}
	if len(r.Kvs) == 0 {
		return nil, r.Header, nil
	}
	return r.Kvs[0], r.Header, nil
}

func firstCreate(prefix []byte) *etcdserverpb.RangeRequest {
	return &etcdserverpb.RangeRequest{Key: prefix, RangeEnd: prefixEnd(prefix), Limit: 1,
		SortTarget: etcdserverpb.RangeRequest_CREATE, SortOrder: etcdserverpb.RangeRequest_ASCEND}
}

// waitDeletes waits until no key under prefix with a create revision at
// most maxRev is left: the keys queued ahead of the caller's. It waits
// on the newest of them each time, as clientv3 concurrency does.
// A nil header: nothing can be ahead (maxRev < 1: a max_create_revision
// of 0 is no bound in etcd's Range; the first write of an empty store
// is revision 2, as in etcd, so a candidate's maxRev is at least 1).
func (c *selfConn) waitDeletes(ctx context.Context, prefix []byte, maxRev int64) (*etcdserverpb.ResponseHeader, error) {
	if maxRev < 1 {
		return nil, nil
	}
	for {
		r, err := c.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: prefix, RangeEnd: prefixEnd(prefix), Limit: 1,
			SortTarget: etcdserverpb.RangeRequest_CREATE, SortOrder: etcdserverpb.RangeRequest_DESCEND, MaxCreateRevision: maxRev})
		if err != nil {
			return nil, err
		}
		if len(r.Kvs) == 0 {
			return r.Header, nil
		}
		err = c.watch(ctx, r.Kvs[0].Key, nil, r.Header.Revision+1, func(ev *mvccpb.Event, _ *etcdserverpb.ResponseHeader) (bool, error) {
			return ev.Type == mvccpb.DELETE, nil
		})
		if err != nil {
			return nil, err
		}
	}
}

// errWatchEnded: the watch ended before the event waited for.
var errWatchEnded = status.Error(codes.Unavailable, etcdPrefix+"watch ended")

// watch watches key (to end) from rev and calls fn for each event until
// fn says stop, fn fails, or ctx ends.
func (c *selfConn) watch(ctx context.Context, key, end []byte, rev int64, fn func(*mvccpb.Event, *etcdserverpb.ResponseHeader) (bool, error)) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws, err := c.w.Watch(wctx)
	if err != nil {
		return err
	}
	if err := ws.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{
		CreateRequest: &etcdserverpb.WatchCreateRequest{Key: key, RangeEnd: end, StartRevision: rev}}}); err != nil {
		return err
	}
	for {
		r, err := ws.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if r.Canceled {
			if r.CompactRevision != 0 {
				return rpctypes.ErrGRPCCompacted
			}
			if r.CancelReason != "" {
				return status.Error(codes.Unavailable, r.CancelReason)
			}
			return errWatchEnded
		}
		for _, ev := range r.Events {
			stop, err := fn(ev, r.Header)
			if err != nil || stop {
				return err
			}
		}
	}
}

// ctxErr is the error a call whose context ended returns.
func ctxErr(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCDeadlineExceeded
	}
	return err
}
