package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/raftnode"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWireError pins the one mapping from domain errors to what clients
// see, which the interceptors apply to every handler.
func TestWireError(t *testing.T) {
	de := dkverr.New(dkverr.Conflict, "taken")
	un := status.Error(codes.Unavailable, "transport closed")
	for _, c := range []struct {
		in   error
		code codes.Code
		same bool // passed through unchanged
	}{
		{de, dkverr.Conflict.GRPCCode(), true},
		{fmt.Errorf("wrapped: %w", de), dkverr.Conflict.GRPCCode(), true},
		{raftnode.ErrUnknownOutcome, codes.DeadlineExceeded, false},
		{fmt.Errorf("propose: %w", raftnode.ErrUnknownOutcome), codes.DeadlineExceeded, false},
		{context.Canceled, codes.Canceled, false},
		{context.DeadlineExceeded, codes.DeadlineExceeded, false},
		{un, codes.Unavailable, true},
		{errors.New("disk on fire"), dkverr.Internal.GRPCCode(), false},
	} {
		got := wireError(c.in)
		if code := status.Code(got); code != c.code {
			t.Errorf("wireError(%v) has code %v, want %v", c.in, code, c.code)
		}
		if c.same && got != c.in {
			t.Errorf("wireError(%v) = %v, want it unchanged", c.in, got)
		}
	}
	if wireError(nil) != nil {
		t.Error("wireError(nil) is not nil")
	}
}

// TestInterceptorsMapErrors: the edge applies wireError to unary and
// stream handlers alike.
func TestInterceptorsMapErrors(t *testing.T) {
	_, err := unaryWireErrors(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x"},
		func(context.Context, any) (any, error) { return nil, raftnode.ErrUnknownOutcome })
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("unary: %v, want DeadlineExceeded", err)
	}
	err = streamWireErrors(nil, nil, &grpc.StreamServerInfo{FullMethod: "/x"},
		func(any, grpc.ServerStream) error { return raftnode.ErrUnknownOutcome })
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("stream: %v, want DeadlineExceeded", err)
	}
}
