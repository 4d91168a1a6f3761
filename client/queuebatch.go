package client

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
)

// MaxQueueBatch is the most jobs one QueueClaimBatch claims and the most
// acks one QueueAckBatch carries.
const MaxQueueBatch = 64

// QueueClaimedJob is one more job of a batch claim (QueueClaimResult.More).
type QueueClaimedJob struct {
	Job    *KeyValue
	Handle LockHandle
	Marked bool
}

// QueueClaimBatch is QueueClaim for up to max jobs (1 to MaxQueueBatch)
// in one raft command: the first is in the result's Job, Handle and
// Marked, the others, in claim order, in More. Each has its own claim
// lock and lease of ttl, whose visibility timeout runs from this claim.
// It is the server side of recipe.Queue's ClaimBatch; use that.
func (c *Client) QueueClaimBatch(ctx context.Context, prefix string, ttl time.Duration, max int) (*QueueClaimResult, error) {
	r, _, err := c.queueClaim(ctx, prefix, ttl, max, nil)
	return r, err
}

// QueueAckClaim applies the acks (up to MaxQueueBatch, as QueueAckBatch
// would) and then claims up to max jobs (as QueueClaimBatch), all in one
// raft command: a consumer's "done with these, next please" in one round
// trip. The acks apply whatever the claim finds (a paused queue, no
// visible job). A failure whose outcome is unknown is the caller's to
// retry (recipe.Queue's AckClaimBatch does, telling the acks' retries
// apart). It is the server side of that; use it.
func (c *Client) QueueAckClaim(ctx context.Context, prefix string, ttl time.Duration, max int, acks []QueueAckItem) (*QueueClaimResult, []QueueAckOutcome, error) {
	if len(acks) > MaxQueueBatch {
		return nil, nil, newError(ErrInvalidInput, "queue claim with %d acks: the limit is %d", len(acks), MaxQueueBatch)
	}
	return c.queueClaim(ctx, prefix, ttl, max, acks)
}

func (c *Client) queueClaim(ctx context.Context, prefix string, ttl time.Duration, max int, acks []QueueAckItem) (*QueueClaimResult, []QueueAckOutcome, error) {
	if ttl < time.Second {
		return nil, nil, newError(ErrInvalidInput, "queue claim ttl %v: it must be between 1s and 1 year", ttl)
	}
	if max < 1 || max > MaxQueueBatch {
		return nil, nil, newError(ErrInvalidInput, "queue claim of %d jobs: it must be 1 to %d", max, MaxQueueBatch)
	}
	// As in QueueClaim, the owner makes a retry return what the first
	// attempt claimed.
	req := &dkvpb.QueueClaimRequest{QueuePrefix: []byte(prefix), Owner: newOwner(), TtlMs: ttl.Milliseconds(), Mark: true, Acks: ackRequests(acks)}
	if max > 1 {
		req.MaxJobs = int64(max)
	}
	var resp *dkvpb.QueueClaimResponse
	// Exactly once (session.go): a claim sent again after an unknown
	// outcome gets the first attempt's reply, so the job it claimed is
	// not claimed a second time and an "already" is never its own echo.
	err := c.callOnce(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.qu.Claim(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	var outs []QueueAckOutcome
	if len(acks) > 0 {
		if outs, err = ackOutcomes(resp.GetAckResults(), len(acks)); err != nil {
			return nil, nil, err
		}
	}
	r := &QueueClaimResult{Found: resp.GetFound(), Paused: resp.GetPaused(), LockedUnmarked: resp.GetLockedUnmarked(), Truncated: resp.GetTruncated(), Marked: resp.GetMarked()}
	if r.Found {
		r.Job, r.Handle = fromPB(resp.GetKv()), handleFromPB(resp.GetHandle())
	}
	for _, m := range resp.GetMore() {
		r.More = append(r.More, QueueClaimedJob{Job: fromPB(m.GetKv()), Handle: handleFromPB(m.GetHandle()), Marked: m.GetMarked()})
	}
	if ms := resp.GetNextRunAtMs(); ms > 0 {
		r.NextRunAt = time.UnixMilli(ms)
	}
	return r, outs, nil
}

func ackRequests(items []QueueAckItem) []*dkvpb.QueueAckRequest {
	var out []*dkvpb.QueueAckRequest
	for _, it := range items {
		h := it.Handle
		a := &dkvpb.QueueAckRequest{Handle: &dkvpb.LockHandle{Key: []byte(h.Key), Owner: h.Owner, Lease: h.Lease, Token: h.Token}, MarkerKey: []byte(it.MarkerKey)}
		for _, p := range it.Puts {
			a.Puts = append(a.Puts, &dkvpb.PutRequest{Key: []byte(p.Key), Value: p.Value})
		}
		out = append(out, a)
	}
	return out
}

func ackOutcomes(results []*dkvpb.QueueAckResult, n int) ([]QueueAckOutcome, error) {
	if len(results) != n {
		return nil, newError(ErrInternal, "queue ack batch: %d results for %d acks", len(results), n)
	}
	out := make([]QueueAckOutcome, n)
	for i, r := range results {
		if r.GetOk() {
			out[i].Already = r.GetAlready()
			continue
		}
		kind := ErrInternal
		if code, ok := dkverr.CodeForReason(r.GetReason()); ok {
			if k, ok := codeErrors[code]; ok {
				kind = k
			}
		}
		out[i].Err = &Error{Kind: kind, Msg: r.GetMessage()}
	}
	return out, nil
}

// QueueAckItem is one ack of QueueAckBatch: as QueueAck's arguments.
type QueueAckItem struct {
	Handle    LockHandle
	MarkerKey string
	Puts      []QueuePut
}

// QueueAckOutcome is one ack's outcome in QueueAckBatch: Err is nil (and
// Already as QueueAck's) or the refusal (ErrLocked once the claim
// expired or moved on); a refused ack changed nothing.
type QueueAckOutcome struct {
	Already bool
	Err     error
}

// QueueAckBatch applies up to MaxQueueBatch acks (on distinct jobs) in
// one raft command, each exactly as QueueAck would and independently of
// the others. The error is the call's (then no outcome is known, and
// ErrUnknownOutcome means the batch may have applied); otherwise
// outcomes[i] is items[i]'s. It is the server side of recipe.Queue's
// AckBatch; use that.
func (c *Client) QueueAckBatch(ctx context.Context, items []QueueAckItem) ([]QueueAckOutcome, error) {
	if len(items) == 0 || len(items) > MaxQueueBatch {
		return nil, newError(ErrInvalidInput, "queue ack batch of %d acks: it must be 1 to %d", len(items), MaxQueueBatch)
	}
	req := &dkvpb.QueueAckBatchRequest{Acks: ackRequests(items)}
	var resp *dkvpb.QueueAckBatchResponse
	// Exactly once, as queueClaim.
	err := c.callOnce(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.qu.AckBatch(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ackOutcomes(resp.GetResults(), len(items))
}
