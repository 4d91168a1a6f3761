package client

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// MemberAdd adds a member with the given name and peer URL. Add it as a
// learner (asLearner) and promote it once it has caught up: a voter that
// is added but not running counts against the quorum.
func (c *Client) MemberAdd(ctx context.Context, name, peerURL string, asLearner bool) (*dkvpb.MemberAddResponse, error) {
	var resp *dkvpb.MemberAddResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.MemberAdd(ctx, &dkvpb.MemberAddRequest{Name: name, PeerUrl: peerURL, IsLearner: asLearner}, o...)
		return err
	})
	return resp, err
}

// MemberPromote makes a learner a voter. It fails with ErrConflict while
// the learner has not caught up with the leader.
func (c *Client) MemberPromote(ctx context.Context, name string) (*dkvpb.MemberPromoteResponse, error) {
	var resp *dkvpb.MemberPromoteResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.MemberPromote(ctx, &dkvpb.MemberPromoteRequest{Name: name}, o...)
		return err
	})
	return resp, err
}

// MemberRemove removes a member. Removing a voter is refused with
// ErrConflict when the reachable remaining voters would not form a quorum.
func (c *Client) MemberRemove(ctx context.Context, name string) (*dkvpb.MemberRemoveResponse, error) {
	var resp *dkvpb.MemberRemoveResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.MemberRemove(ctx, &dkvpb.MemberRemoveRequest{Name: name}, o...)
		return err
	})
	return resp, err
}

// LeaderTransfer moves leadership to the named voter and returns once it
// leads.
func (c *Client) LeaderTransfer(ctx context.Context, name string) (*dkvpb.LeaderTransferResponse, error) {
	var resp *dkvpb.LeaderTransferResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.LeaderTransfer(ctx, &dkvpb.LeaderTransferRequest{Name: name}, o...)
		return err
	})
	return resp, err
}

// HashKV hashes the keyspace of the member that serves the call at rev (0:
// current), to compare replicas.
func (c *Client) HashKV(ctx context.Context, rev int64) (*dkvpb.HashKVResponse, error) {
	var resp *dkvpb.HashKVResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.cluster.HashKV(ctx, &dkvpb.HashKVRequest{Revision: rev}, o...)
		return err
	})
	return resp, err
}
