package state

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/mvcc"
	"google.golang.org/protobuf/proto"
)

// The job queue's commands (api/dkv/v1/queue.proto): a claim finds and
// locks the first visible job of a queue; an ack ends a claim.

var queueClaimCommand = Command{
	name: "queue_claim",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateQueueClaim(req.GetQueueClaim(), l)
	},
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// It reads the queue's jobs and markers and locks one of them.
		r := msg.(*dkvpb.QueueClaimRequest)
		n := []Need{{auth.Read | auth.Write, auth.SpanOf(r.GetQueuePrefix(), nil, true), "queue claim"}}
		for _, a := range r.GetAcks() {
			n = queueAckNeeds(a, n) // each ack it carries needs what it needs alone
		}
		return n, nil
	},
	growsData: always,
	write: func(w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		// Run-at is compared with the entry's time, never this member's
		// clock, so every member claims the same job.
		qc := w.QueueClaim(req.GetQueueClaim(), req.GetTimeUnixNano()/1e6)
		qc.ClaimedUnixNano = req.GetTimeUnixNano()
		return qc, nil
	},
}

var queueAckCommand = Command{
	name: "queue_ack",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateQueueAck(req.GetQueueAck(), l)
	},
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// It deletes the job and its marker, writes the puts and releases
		// the job's lock; a refusal reveals only the claim's state.
		return queueAckNeeds(msg.(*dkvpb.QueueAckRequest), nil), nil
	},
	growsData: func(req *dkvpb.InternalRequest) bool {
		return len(req.GetQueueAck().GetPuts()) > 0
	},
	write: func(w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.QueueAck(req.GetQueueAck())
	},
}

var queueAckBatchCommand = Command{
	name: "queue_ack_batch",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateQueueAckBatch(req.GetQueueAckBatch(), l)
	},
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// Each ack needs what it needs alone.
		var n []Need
		for _, a := range msg.(*dkvpb.QueueAckBatchRequest).GetAcks() {
			n = queueAckNeeds(a, n)
		}
		return n, nil
	},
	growsData: func(req *dkvpb.InternalRequest) bool {
		for _, a := range req.GetQueueAckBatch().GetAcks() {
			if len(a.GetPuts()) > 0 {
				return true
			}
		}
		return false
	},
	write: func(w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.QueueAckBatch(req.GetQueueAckBatch()), nil
	},
}

func queueAckNeeds(r *dkvpb.QueueAckRequest, n []Need) []Need {
	n = append(n, Need{auth.Write, auth.Key(r.GetHandle().GetKey()), "queue ack"}, Need{auth.Write, auth.Key(r.GetMarkerKey()), "queue ack marker"})
	for _, p := range r.GetPuts() {
		n = putNeeds(p, n)
	}
	return n
}
