package server

import (
	"context"
	"errors"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/raftnode"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
			return nil, wireErr(err)
		}
	}
	var (
		resp *dkvpb.RangeResponse
		err  error
	)
	if req.GetLock() != nil {
		// Check the lock and read the keys in one consistent view.
		snap := k.s.store.DB().NewSnapshot()
		defer snap.Close()
		if err := mvcc.CheckReadLock(snap, req.GetLock()); err != nil {
			return nil, err
		}
		resp, err = k.s.kv.Range(snap, req)
	} else {
		resp, err = k.s.kv.RangeLatest(k.s.store.DB(), req)
	}
	if err != nil {
		return nil, wireErr(err)
	}
	k.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	if err := replyFits(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// replyFits refuses a range reply over the gRPC message limit with a
// message that says so and how to page, instead of the transport's
// opaque ResourceExhausted after the reply was built.
func replyFits(resp *dkvpb.RangeResponse) error {
	n := proto.Size(resp)
	if n <= maxSendMsgBytes {
		return nil
	}
	return dkverr.New(dkverr.InvalidInput,
		"the reply to this range would be %d bytes (%d keys), over the limit of %d bytes for one message: read it in pages with a limit (--limit N; RangeRequest.limit), starting each page after the last key of the previous one (or ask for keys_only or count_only)",
		n, len(resp.GetKvs()), maxSendMsgBytes)
}

func (k *kvService) Put(ctx context.Context, req *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
	resp, err := propose[*dkvpb.PutResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: req}})
	if err != nil {
		return nil, err
	}
	k.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	return resp, nil
}

func (k *kvService) DeleteRange(ctx context.Context, req *dkvpb.DeleteRangeRequest) (*dkvpb.DeleteRangeResponse, error) {
	resp, err := propose[*dkvpb.DeleteRangeResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: req}})
	if err != nil {
		return nil, err
	}
	k.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	return resp, nil
}

func (k *kvService) Txn(ctx context.Context, req *dkvpb.TxnRequest) (*dkvpb.TxnResponse, error) {
	resp, err := propose[*dkvpb.TxnResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: req}})
	if err != nil {
		return nil, err
	}
	k.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	return resp, nil
}

func (k *kvService) Counter(ctx context.Context, req *dkvpb.CounterRequest) (*dkvpb.CounterResponse, error) {
	resp, err := propose[*dkvpb.CounterResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: req}})
	if err != nil {
		return nil, err
	}
	k.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	return resp, nil
}

func (k *kvService) Compact(ctx context.Context, req *dkvpb.CompactRequest) (*dkvpb.CompactResponse, error) {
	resp, err := propose[*dkvpb.CompactResponse](ctx, k.s, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: req}})
	if err != nil {
		return nil, err
	}
	k.s.fillHeader(&resp.Header, resp.GetHeader().GetRevision())
	return resp, nil
}

// propose validates req, replicates it and returns the typed response.
func propose[T proto.Message](ctx context.Context, s *Server, req *dkvpb.InternalRequest) (T, error) {
	var zero T
	if err := mvcc.Validate(req, s.limits); err != nil {
		return zero, err
	}
	if err := s.checkSpace(req); err != nil {
		return zero, err
	}
	res, err := s.proposeRequest(ctx, req)
	if err != nil {
		return zero, wireErr(err)
	}
	if res.Err != nil {
		return zero, res.Err
	}
	resp, ok := res.Resp.(T)
	if !ok {
		return zero, dkverr.New(dkverr.Internal, "unexpected response %T", res.Resp)
	}
	return resp, nil
}

// proposeRequest gives req a cluster-unique id, replicates it and waits for
// the result of applying it.
func (s *Server) proposeRequest(ctx context.Context, req *dkvpb.InternalRequest) (mvcc.Result, error) {
	if req.Id == 0 {
		req.Id = s.node.NextID()
	}
	data, err := proto.Marshal(req)
	if err != nil {
		return mvcc.Result{}, dkverr.New(dkverr.InvalidInput, "encode request: %v", err)
	}
	return s.node.Propose(ctx, req.Id, data)
}

// fillHeader completes a response header with node identity and term,
// keeping the revision the state machine reported.
func (s *Server) fillHeader(h **dkvpb.ResponseHeader, rev int64) {
	if *h == nil {
		*h = &dkvpb.ResponseHeader{}
	}
	(*h).ClusterId = s.clusterID
	(*h).MemberId = s.memberID
	(*h).RaftTerm = s.node.Status().Term
	if rev == 0 {
		(*h).Revision = s.kv.Revision()
	}
}

// wireErr maps internal errors to what clients see: DKV codes travel as
// they are; an unknown outcome is DeadlineExceeded (the client must not
// assume the write failed); a cancelled caller is Canceled.
func wireErr(err error) error {
	var de *dkverr.Error
	switch {
	case errors.As(err, &de):
		return err
	case errors.Is(err, raftnode.ErrUnknownOutcome):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return dkverr.New(dkverr.Internal, "%v", err)
}
