package server

import (
	"context"
	"errors"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/raftnode"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/server/grpcapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The path of a write, from handler to reply, and the edge where errors
// become wire errors. Inside the server errors are domain errors
// (*dkverr.Error, raftnode.ErrUnknownOutcome, context errors); the
// interceptors below map them once for every client: gRPC, the HTTP
// gateway and the embedded client, which all reach grpcSrv.

// response is a command's response: it has a header.
type response = grpcapi.Response

// propose is the one propose-and-respond path (proposeResponse),
// returning the response typed as the command answers (grpcapi.Propose).
func propose[T response](ctx context.Context, s *Server, req *dkvpb.InternalRequest) (T, error) {
	return grpcapi.Propose[T](ctx, grpcNode{s}, req)
}

// proposeResponse validates req and refuses it if the NOSPACE alarm
// would, both as its command's row in the registry (package state) says,
// replicates it, waits for it to be applied here, and returns the
// response with its header completed. A refusal by the state machine is
// returned as its error.
func (s *Server) proposeResponse(ctx context.Context, req *dkvpb.InternalRequest) (response, error) {
	cmd, _ := state.Lookup(req)
	if err := cmd.Validate(req, s.limits); err != nil {
		return nil, err
	}
	if err := s.checkSpace(cmd, req); err != nil {
		return nil, err
	}
	if err := s.stampAuth(ctx, req); err != nil {
		return nil, err
	}
	if err := s.stampSession(ctx, req); err != nil { // session.go
		return nil, err
	}
	res, err := s.proposeRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	resp, ok := res.Resp.(response)
	if !ok || resp.GetHeader() == nil {
		return nil, dkverr.New(dkverr.Internal, "unexpected response %T", res.Resp)
	}
	// In place: a txn's op responses share the header (mvcc.StampRevision).
	s.completeHeader(resp.GetHeader())
	return resp, nil
}

// proposeRequest gives req a cluster-unique id, replicates it and waits for
// the result of applying it.
func (s *Server) proposeRequest(ctx context.Context, req *dkvpb.InternalRequest) (state.Result, error) {
	if req.Id == 0 {
		req.Id = s.node.NextID()
	}
	data, err := proto.Marshal(req)
	if err != nil {
		return state.Result{}, dkverr.New(dkverr.InvalidInput, "encode request: %v", err)
	}
	if req.GetSession() != nil {
		return s.node.ProposeIdempotent(ctx, req.Id, data) // applies once however often proposed
	}
	return s.node.Propose(ctx, req.Id, data)
}

// fillHeader is the one place response headers get this member's
// identity and raft term; it returns h.
func (s *Server) fillHeader(h *dkvpb.ResponseHeader) *dkvpb.ResponseHeader {
	h.ClusterId = s.clusterID
	h.MemberId = s.memberID
	if s.node != nil {
		h.RaftTerm = s.node.Status().Term
	}
	return h
}

// header is a response header at revision rev (0: the revision applied
// so far).
func (s *Server) header(rev int64) *dkvpb.ResponseHeader {
	return s.completeHeader(&dkvpb.ResponseHeader{Revision: rev})
}

// completeHeader fills in h, keeping the revision it carries, or the
// applied revision if none.
func (s *Server) completeHeader(h *dkvpb.ResponseHeader) *dkvpb.ResponseHeader {
	if h.Revision == 0 {
		h.Revision = s.kv.Revision()
	}
	return s.fillHeader(h)
}

// wireError maps a domain error to what clients see: DKV codes and gRPC
// statuses travel as they are; an unknown outcome is DeadlineExceeded (the
// client must not assume the write failed); a cancelled caller is
// Canceled; anything else is Internal.
func wireError(err error) error {
	var de *dkverr.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &de):
		return err
	case errors.Is(err, raftnode.ErrUnknownOutcome):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err // from gRPC itself (a broken stream)
	}
	return dkverr.New(dkverr.Internal, "%v", err)
}

// unaryWireErrors and streamWireErrors apply wireError at the edge. They
// run inside the metrics interceptor, which counts the wire codes.
func unaryWireErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, wireError(err)
}

func streamWireErrors(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return wireError(handler(srv, ss))
}
