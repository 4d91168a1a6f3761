package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
)

// StartInProcess starts the node, waits until it is Ready, and returns a
// connection to it over the in-memory pipe (DialInProcess): the start-up
// shared by the embedded mode and the in-process test harness. If any
// step fails, or ctx ends first, the node is stopped and the error says
// which step.
func (s *Server) StartInProcess(ctx context.Context) (*grpc.ClientConn, error) {
	if err := s.Start(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	select {
	case <-s.Ready():
	case <-ctx.Done():
		s.Stop()
		return nil, fmt.Errorf("not ready: %w", ctx.Err())
	}
	conn, err := s.DialInProcess(ctx)
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("connecting in process: %w", err)
	}
	return conn, nil
}
