package grpcapi

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Node is what the services need from the node serving them.
type Node interface {
	// Propose validates req as its command's row in the registry
	// (package state) says, refuses it if the NOSPACE alarm would,
	// replicates it, waits for it to be applied here and returns the
	// response with its header completed. A refusal by the state machine
	// is returned as its error.
	Propose(ctx context.Context, req *dkvpb.InternalRequest) (Response, error)
}

// Response is a command's response: it has a header.
type Response interface {
	proto.Message
	GetHeader() *dkvpb.ResponseHeader
}

// API is the services over one Node.
type API struct {
	n Node
}

// New is the services over n.
func New(n Node) *API { return &API{n: n} }

// Register registers the services on gs.
func (a *API) Register(gs grpc.ServiceRegistrar) {
	dkvpb.RegisterRateLimitServer(gs, &rateLimitService{n: a.n})
	dkvpb.RegisterQueueServer(gs, &queueService{n: a.n})
}

// propose is Node.Propose with the response of the type the command
// answers with.
func propose[T Response](ctx context.Context, n Node, req *dkvpb.InternalRequest) (T, error) {
	var zero T
	r, err := n.Propose(ctx, req)
	if err != nil {
		return zero, err
	}
	resp, ok := r.(T)
	if !ok {
		return zero, dkverr.New(dkverr.Internal, "unexpected response %T", r)
	}
	return resp, nil
}
