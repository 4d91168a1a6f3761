package grpcapi

import (
	"context"
	"errors"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// kvService implements dkvpb.KVServer: validate, then propose writes
// through raft or serve reads after a ReadIndex wait.
type kvService struct {
	dkvpb.UnimplementedKVServer
	a *API
}

func (k *kvService) Range(ctx context.Context, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	if err := mvcc.ValidateRange(req, k.a.o.Limits); err != nil {
		return nil, err
	}
	// UnsafeLocalReads skips the wait on purpose: see Options. A read
	// under a lock handle always waits: it must not confirm a stale lock.
	if !req.GetSerializable() && (!k.a.o.UnsafeLocalReads || req.GetLock() != nil) {
		if err := k.a.n.WaitLinearizable(ctx); err != nil {
			return nil, err
		}
		// The wait may have applied an auth change this member had not
		// seen when the interceptor checked.
		if err := k.a.n.Recheck(ctx, req); err != nil {
			return nil, err
		}
	}
	var (
		resp *dkvpb.RangeResponse
		err  error
	)
	if req.GetLock() != nil {
		// Check the lock and read the keys in one consistent view.
		snap := k.a.n.Applied().Snapshot()
		defer snap.Close()
		if err := snap.CheckReadLock(req.GetLock()); err != nil {
			return nil, err
		}
		resp, err = snap.Range(req)
	} else {
		resp, err = k.a.n.Applied().Latest().Range(req)
	}
	if err != nil {
		return nil, err
	}
	// The store's header carries only the revision; complete it in place.
	if resp.Header == nil {
		resp.Header = &dkvpb.ResponseHeader{}
	}
	resp.Header = k.a.n.CompleteHeader(resp.Header)
	if err := k.a.replyFits(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// replyFits refuses a range reply over the gRPC message limit with a
// message that says so and how to page, instead of the transport's
// opaque ResourceExhausted after the reply was built.
func (a *API) replyFits(resp *dkvpb.RangeResponse) error {
	limit := a.o.MaxReplyBytes
	if replyBound(resp) <= limit {
		return nil // proto.Size walks the whole reply: skip it when it cannot matter
	}
	n := proto.Size(resp)
	if n <= limit {
		return nil
	}
	return dkverr.New(dkverr.InvalidInput,
		"the reply to this range would be %d bytes (%d keys), over the limit of %d bytes for one message: read it in pages with a limit (--limit N; RangeRequest.limit), starting each page after the last key of the previous one (or ask for keys_only or count_only)",
		n, len(resp.GetKvs()), limit)
}

func (k *kvService) Put(ctx context.Context, req *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
	return Propose[*dkvpb.PutResponse](ctx, k.a.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: req}})
}

func (k *kvService) DeleteRange(ctx context.Context, req *dkvpb.DeleteRangeRequest) (*dkvpb.DeleteRangeResponse, error) {
	return Propose[*dkvpb.DeleteRangeResponse](ctx, k.a.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: req}})
}

func (k *kvService) Txn(ctx context.Context, req *dkvpb.TxnRequest) (*dkvpb.TxnResponse, error) {
	return Propose[*dkvpb.TxnResponse](ctx, k.a.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: req}})
}

func (k *kvService) Counter(ctx context.Context, req *dkvpb.CounterRequest) (*dkvpb.CounterResponse, error) {
	return Propose[*dkvpb.CounterResponse](ctx, k.a.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: req}})
}

func (k *kvService) Compact(ctx context.Context, req *dkvpb.CompactRequest) (*dkvpb.CompactResponse, error) {
	return Propose[*dkvpb.CompactResponse](ctx, k.a.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: req}})
}

// SessionOpen answers Unimplemented while sessions are unavailable (a
// member older than 0.2 is in the cluster), as an older server does, so
// the Go client writes without a session.
func (k *kvService) SessionOpen(ctx context.Context, req *dkvpb.SessionOpenRequest) (*dkvpb.SessionOpenResponse, error) {
	resp, err := Propose[*dkvpb.SessionOpenResponse](ctx, k.a.n, &dkvpb.InternalRequest{
		TimeUnixNano: time.Now().UnixNano(),
		Request:      &dkvpb.InternalRequest_SessionOpen{SessionOpen: req},
	})
	var de *dkverr.Error
	if state.SessionsUnavailable(err) && errors.As(err, &de) {
		return nil, status.Error(codes.Unimplemented, de.Msg)
	}
	return resp, err
}

// replyBound is an upper bound on proto.Size(resp), computed without
// walking the messages: per KeyValue its key and value plus at most 60
// bytes of tags and varints (the kvs entry's tag and length, the key and
// value tags and lengths, four int64 fields), and at most 256 bytes for
// the header, count and more.
func replyBound(resp *dkvpb.RangeResponse) int {
	n := 256
	for _, kv := range resp.GetKvs() {
		n += len(kv.GetKey()) + len(kv.GetValue()) + 60
	}
	return n
}
