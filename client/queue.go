package client

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// QueueClaimResult is what QueueClaim found.
type QueueClaimResult struct {
	// Found says whether a job was claimed: Job is it and Handle its
	// claim lock.
	Found  bool
	Job    *KeyValue
	Handle LockHandle
	// Paused: the queue is paused and nothing was claimed.
	Paused bool
	// NextRunAt is the earliest run-at of a job skipped for it (zero if
	// none): when to look again.
	NextRunAt time.Time
	// LockedUnmarked counts the jobs skipped as locked without a claim
	// marker (their lock's expiry wakes no watch).
	LockedUnmarked int64
	// Marked: the claim also counted the job's attempt and put its claim
	// marker (Job is the job as written back).
	Marked bool
	// Truncated: the server looked at its limit of job keys and found
	// none visible; more may follow.
	Truncated bool
	// More are the jobs after the first of a QueueClaimBatch, in claim
	// order.
	More []QueueClaimedJob
}

// QueueClaim claims, in one raft command, the first visible job of the
// queue under prefix (client/recipe's layout, api/dkv/v1/queue.proto):
// the lock on its key is granted on a new lease of ttl, the job's attempt
// counted and its claim marker put. It is the server
// side of recipe.Queue's Claim; use that.
func (c *Client) QueueClaim(ctx context.Context, prefix string, ttl time.Duration) (*QueueClaimResult, error) {
	return c.QueueClaimBatch(ctx, prefix, ttl, 1)
}

// QueuePut is a key written by QueueAck.
type QueuePut struct {
	Key   string
	Value []byte
}

// QueueAck ends the claim h in one raft command: while h is current it
// deletes the job (h.Key) and markerKey, writes puts and releases the
// lock; ErrLocked once the claim expired or moved on. already reports an
// ack of h that had applied before (the lock free, its last token h's,
// the job gone): to the caller that retries after ErrUnknownOutcome, its
// first attempt applied. It is the server side of recipe.Job's Ack and
// Nack; use those.
func (c *Client) QueueAck(ctx context.Context, h LockHandle, markerKey string, puts ...QueuePut) (already bool, err error) {
	req := &dkvpb.QueueAckRequest{Handle: &dkvpb.LockHandle{Key: []byte(h.Key), Owner: h.Owner, Lease: h.Lease, Token: h.Token}, MarkerKey: []byte(markerKey)}
	for _, p := range puts {
		req.Puts = append(req.Puts, &dkvpb.PutRequest{Key: []byte(p.Key), Value: p.Value})
	}
	var resp *dkvpb.QueueAckResponse
	// Exactly once: an attempt sent again after an unknown outcome gets
	// the first attempt's reply, so its "already" is never the echo of
	// an attempt the caller did not see.
	err = c.callOnce(ctx, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.qu.Ack(ctx, req, o...)
		return err
	})
	if err != nil {
		return false, err
	}
	return resp.GetAlready(), nil
}
