package bench

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc/metadata"
)

// workerSession is one worker's client session (--sessions): the worker
// opens it on its first write and sends each write with the next
// sequence, as the Go client does (client/session.go), so a run measures
// what exactly-once writes cost the cluster. A worker has one write in
// flight, so each write acknowledges every earlier one.
type workerSession struct {
	kv  dkvpb.KVClient
	r   interface{ Uint64() uint64 }
	id  uint64
	seq uint64
}

// ctx returns the context for the worker's next write: ctx itself
// without --sessions.
func (s *workerSession) ctx(ctx context.Context, on bool) (context.Context, error) {
	if !on {
		return ctx, nil
	}
	if s.id == 0 {
		id := s.r.Uint64() | 1
		if _, err := s.kv.SessionOpen(ctx, &dkvpb.SessionOpenRequest{Id: id, TtlMs: 120_000}); err != nil {
			return nil, err
		}
		s.id = id
	}
	s.seq++
	return metadata.AppendToOutgoingContext(ctx, dkvpb.SessionMetadata, dkvpb.FormatSession(s.id, s.seq, s.seq)), nil
}
