package server

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server/grpcapi"
)

// grpcNode is the node as the gRPC services of package grpcapi see it.
type grpcNode struct{ s *Server }

var _ grpcapi.Node = grpcNode{}

func (n grpcNode) Propose(ctx context.Context, req *dkvpb.InternalRequest) (grpcapi.Response, error) {
	return n.s.proposeResponse(ctx, req)
}

// grpcAPI is the gRPC services of package grpcapi over this node.
func (s *Server) grpcAPI() *grpcapi.API { return grpcapi.New(grpcNode{s}) }
