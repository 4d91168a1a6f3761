package grpcapi

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// queueService implements dkvpb.QueueServer: a claim is one raft command
// (mvcc.Writer.QueueClaim) that finds the first visible job and grants its
// lock.
type queueService struct {
	dkvpb.UnimplementedQueueServer
	n Node
}

// Claim stamps this member's clock into the command: apply compares the
// jobs' run-at with that time, so every member claims the same job.
func (q *queueService) Claim(ctx context.Context, req *dkvpb.QueueClaimRequest) (*dkvpb.QueueClaimResponse, error) {
	return Propose[*dkvpb.QueueClaimResponse](ctx, q.n, &dkvpb.InternalRequest{
		TimeUnixNano: time.Now().UnixNano(),
		Request:      &dkvpb.InternalRequest_QueueClaim{QueueClaim: req},
	})
}

// Ack ends a claim in one raft command (mvcc.Writer.QueueAck).
func (q *queueService) Ack(ctx context.Context, req *dkvpb.QueueAckRequest) (*dkvpb.QueueAckResponse, error) {
	return Propose[*dkvpb.QueueAckResponse](ctx, q.n, &dkvpb.InternalRequest{
		TimeUnixNano: time.Now().UnixNano(), // a claim lock handed to a waiter records it
		Request:      &dkvpb.InternalRequest_QueueAck{QueueAck: req},
	})
}

// AckBatch ends several claims in one raft command
// (mvcc.Writer.QueueAckBatch).
func (q *queueService) AckBatch(ctx context.Context, req *dkvpb.QueueAckBatchRequest) (*dkvpb.QueueAckBatchResponse, error) {
	return Propose[*dkvpb.QueueAckBatchResponse](ctx, q.n, &dkvpb.InternalRequest{
		TimeUnixNano: time.Now().UnixNano(), // a claim lock handed to a waiter records it
		Request:      &dkvpb.InternalRequest_QueueAckBatch{QueueAckBatch: req},
	})
}
