package client

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// Snapshot opens the backup stream of the member that serves it: a tar
// archive of a consistent Pebble checkpoint in SnapshotResponse blobs,
// the first message saying what it holds (revision, keys, member), the
// last carrying the SHA-256 of the blob bytes. Use a client with one
// endpoint to choose the member. Errors from Recv are the server's
// status errors; wrap them with Classify for a client error.
func (c *Client) Snapshot(ctx context.Context) (grpc.ServerStreamingClient[dkvpb.SnapshotResponse], error) {
	st, err := c.maint.Snapshot(ctx, &dkvpb.SnapshotRequest{})
	if err != nil {
		return nil, Classify(ctx, err)
	}
	return st, nil
}

// Classify turns an error of a raw gRPC call on Conn (or a stream this
// package opened) into the client's error, matched with errors.Is.
func Classify(ctx context.Context, err error) error {
	return classify(ctx, err, true, false).err
}

// Alarms lists the raised alarms (NOSPACE, CORRUPT) of every member.
func (c *Client) Alarms(ctx context.Context) ([]*dkvpb.AlarmMember, error) {
	return c.alarm(ctx, &dkvpb.AlarmActionRequest{Action: dkvpb.AlarmActionRequest_GET})
}

// AlarmDisarm clears the raised alarms of member (0: every member) of
// kind (ALARM_TYPE_NONE: every kind), and returns those left raised.
func (c *Client) AlarmDisarm(ctx context.Context, member uint64, kind dkvpb.AlarmType) ([]*dkvpb.AlarmMember, error) {
	return c.alarm(ctx, &dkvpb.AlarmActionRequest{Action: dkvpb.AlarmActionRequest_DISARM, MemberId: member, Alarm: kind})
}

func (c *Client) alarm(ctx context.Context, req *dkvpb.AlarmActionRequest) ([]*dkvpb.AlarmMember, error) {
	var resp *dkvpb.AlarmResponse
	err := c.call(ctx, req.Action == dkvpb.AlarmActionRequest_DISARM, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.maint.Alarm(ctx, req, o...)
		return err
	})
	return resp.GetAlarms(), err
}

// Defragment has the member that serves the call compact its database
// (a Pebble manual compaction of the state, and a truncation of the raft
// log to the applied index); reads and writes go on meanwhile.
func (c *Client) Defragment(ctx context.Context) (*dkvpb.DefragmentResponse, error) {
	var resp *dkvpb.DefragmentResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.maint.Defragment(ctx, &dkvpb.DefragmentRequest{}, o...)
		return err
	})
	return resp, err
}
