package server

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"google.golang.org/protobuf/proto"
)

// kvService implements dkvpb.KVServer: validate, then propose writes
// through raft or serve reads after a ReadIndex wait.
type kvService struct {
	dkvpb.UnimplementedKVServer
	s *Server
}

func (k *kvService) Range(ctx context.Context, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	if err := mvcc.ValidateRange(req, k.s.limits); err != nil {
		return nil, err
	}
	// UnsafeLocalReads skips the wait on purpose: see Config. A read
	// under a lock handle always waits: it must not confirm a stale lock.
	if !req.GetSerializable() && (!k.s.cfg.UnsafeLocalReads || req.GetLock() != nil) {
		if err := k.s.node.WaitLinearizable(ctx); err != nil {
			return nil, err
		}
		// The wait may have applied an auth change this member had not
		// seen when the interceptor checked.
		if _, err := k.s.recheck(ctx, req); err != nil {
			return nil, err
		}
	}
	var (
		resp *dkvpb.RangeResponse
		err  error
	)
	if req.GetLock() != nil {
		// Check the lock and read the keys in one consistent view.
		snap := k.s.applied().Snapshot()
		defer snap.Close()
		if err := snap.CheckReadLock(req.GetLock()); err != nil {
			return nil, err
		}
		resp, err = snap.Range(req)
	} else {
		resp, err = k.s.applied().Latest().Range(req)
	}
	if err != nil {
		return nil, err
	}
	// The store's header carries only the revision; complete it in place.
	if resp.Header == nil {
		resp.Header = &dkvpb.ResponseHeader{}
	}
	resp.Header = k.s.completeHeader(resp.Header)
	if err := replyFits(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// replyFits refuses a range reply over the gRPC message limit with a
// message that says so and how to page, instead of the transport's
// opaque ResourceExhausted after the reply was built.
func replyFits(resp *dkvpb.RangeResponse) error {
	if replyBound(resp) <= maxSendMsgBytes {
		return nil // proto.Size walks the whole reply: skip it when it cannot matter
	}
	n := proto.Size(resp)
	if n <= maxSendMsgBytes {
		return nil
	}
	return dkverr.New(dkverr.InvalidInput,
		"the reply to this range would be %d bytes (%d keys), over the limit of %d bytes for one message: read it in pages with a limit (--limit N; RangeRequest.limit), starting each page after the last key of the previous one (or ask for keys_only or count_only)",
		n, len(resp.GetKvs()), maxSendMsgBytes)
}

func (k *kvService) Put(ctx context.Context, req *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
	return propose[*dkvpb.PutResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: req}})
}

func (k *kvService) DeleteRange(ctx context.Context, req *dkvpb.DeleteRangeRequest) (*dkvpb.DeleteRangeResponse, error) {
	return propose[*dkvpb.DeleteRangeResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: req}})
}

func (k *kvService) Txn(ctx context.Context, req *dkvpb.TxnRequest) (*dkvpb.TxnResponse, error) {
	return propose[*dkvpb.TxnResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: req}})
}

func (k *kvService) Counter(ctx context.Context, req *dkvpb.CounterRequest) (*dkvpb.CounterResponse, error) {
	return propose[*dkvpb.CounterResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: req}})
}

func (k *kvService) Compact(ctx context.Context, req *dkvpb.CompactRequest) (*dkvpb.CompactResponse, error) {
	return propose[*dkvpb.CompactResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: req}})
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
