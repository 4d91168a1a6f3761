package client_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"google.golang.org/grpc"
)

// fakeQueue answers the first Ack by hanging until its server is stopped
// (the connection lost after the request went out: it may have applied)
// and every later Ack with "already": what a real member says to a retry
// of an ack that had applied.
type fakeQueue struct {
	dkvpb.UnimplementedQueueServer
	dkvpb.UnimplementedClusterServer
	calls *atomic.Int64
	first chan struct{}
}

func (f *fakeQueue) Ack(ctx context.Context, _ *dkvpb.QueueAckRequest) (*dkvpb.QueueAckResponse, error) {
	if f.calls.Add(1) == 1 {
		close(f.first)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &dkvpb.QueueAckResponse{Already: true}, nil
}

func startFakeQueue(t *testing.T, f *fakeQueue) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	dkvpb.RegisterQueueServer(s, f)
	dkvpb.RegisterClusterServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String(), s.Stop
}

// TestQueueAckLostConnectionIsUnknownOutcome: an ack whose connection is
// lost after it was sent may have applied, so the client must not retry
// it on its own: the retry's "already" would reach a caller who never saw
// the failure, and the queue recipe would report a done job as an expired
// claim (the chaos suite's "job lost"). The caller gets ErrUnknownOutcome.
func TestQueueAckLostConnectionIsUnknownOutcome(t *testing.T) {
	var calls atomic.Int64
	fa := &fakeQueue{calls: &calls, first: make(chan struct{})}
	fb := &fakeQueue{calls: &calls, first: make(chan struct{})}
	addrA, stopA := startFakeQueue(t, fa)
	addrB, stopB := startFakeQueue(t, fb)
	c := fastClient(t, addrA, addrB)
	go func() {
		// Whichever member got the first attempt loses its connection.
		select {
		case <-fa.first:
			stopA()
		case <-fb.first:
			stopB()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	already, err := c.QueueAck(ctx, client.LockHandle{Key: "q/j/1", Owner: "o", Lease: 1, Token: 1}, "q/c/1")
	if !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("QueueAck: already=%v err=%v after %d attempts; want ErrUnknownOutcome and no retry", already, err, calls.Load())
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the ack was sent %d times; a write that may have applied must not be resent by the client", n)
	}
}
