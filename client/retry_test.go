package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
)

// fakeKV is a KV server whose behaviour each test scripts, to drive the
// client's retry and error paths deterministically.
type fakeKV struct {
	dkvpb.UnimplementedKVServer
	dkvpb.UnimplementedClusterServer
	put   func(context.Context, *dkvpb.PutRequest) (*dkvpb.PutResponse, error)
	rng   func(context.Context, *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error)
	calls atomic.Int64
}

func (f *fakeKV) Put(ctx context.Context, r *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
	f.calls.Add(1)
	return f.put(ctx, r)
}

func (f *fakeKV) Range(ctx context.Context, r *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	f.calls.Add(1)
	return f.rng(ctx, r)
}

func startFake(t *testing.T, f *fakeKV) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	dkvpb.RegisterKVServer(s, f)
	dkvpb.RegisterClusterServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String(), s.Stop
}

func fastClient(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.Config{
		Endpoints:    endpoints,
		DialTimeout:  -1,
		RetryBackoff: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestErrorTable(t *testing.T) {
	for code, want := range map[dkverr.Code]error{
		dkverr.NotFound:      client.ErrNotFound,
		dkverr.Conflict:      client.ErrConflict,
		dkverr.InvalidInput:  client.ErrInvalidInput,
		dkverr.Locked:        client.ErrLocked,
		dkverr.LeaseNotFound: client.ErrLeaseNotFound,
		dkverr.Compacted:     client.ErrCompacted,
		dkverr.Internal:      client.ErrInternal,
	} {
		f := &fakeKV{put: func(context.Context, *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
			return nil, dkverr.New(code, "server says %v", code)
		}}
		addr, _ := startFake(t, f)
		c := fastClient(t, addr)
		_, err := c.Put(context.Background(), "k", nil)
		if !errors.Is(err, want) {
			t.Errorf("%v: got %v, want %v", code, err, want)
		}
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Msg != "server says "+code.String() {
			t.Errorf("%v: server message lost: %#v", code, err)
		}
		for _, other := range []error{client.ErrNotFound, client.ErrConflict, client.ErrUnavailable, client.ErrUnknownOutcome} {
			if other != want && errors.Is(err, other) {
				t.Errorf("%v also matches %v", code, other)
			}
		}
		if n := f.calls.Load(); n != 1 {
			t.Errorf("%v: sent %d times, want once", code, n)
		}
	}
}

// A write the server refused with Unavailable (e.g. no leader yet) did
// not apply, so the client retries it.
func TestWriteRefusedUnavailableIsRetried(t *testing.T) {
	f := &fakeKV{}
	f.put = func(context.Context, *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
		if f.calls.Load() < 3 {
			return nil, dkverr.New(dkverr.Unavailable, "no leader")
		}
		return &dkvpb.PutResponse{Header: &dkvpb.ResponseHeader{Revision: 7}}, nil
	}
	addr, _ := startFake(t, f)
	r, err := fastClient(t, addr).Put(context.Background(), "k", []byte("v"))
	if err != nil || r.Revision != 7 {
		t.Fatalf("put: %+v, %v", r, err)
	}
	if n := f.calls.Load(); n != 3 {
		t.Fatalf("server saw %d attempts, want 3", n)
	}
}

// A write still refused when retries run out reports ErrUnavailable, not
// an unknown outcome: it certainly did not apply.
func TestWriteRefusedTooOftenIsUnavailable(t *testing.T) {
	f := &fakeKV{put: func(context.Context, *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
		return nil, dkverr.New(dkverr.Unavailable, "no leader")
	}}
	addr, _ := startFake(t, f)
	_, err := fastClient(t, addr).Put(context.Background(), "k", nil)
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("got %v, want ErrUnavailable only", err)
	}
	if !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("message lost: %v", err)
	}
}

// A write whose reply never came (deadline) has an unknown outcome and is
// not retried.
func TestWriteDeadlineIsUnknownOutcome(t *testing.T) {
	f := &fakeKV{put: func(ctx context.Context, _ *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	addr, _ := startFake(t, f)
	c := fastClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Put(ctx, "k", nil)
	if !errors.Is(err, client.ErrUnknownOutcome) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnknownOutcome wrapping DeadlineExceeded", err)
	}
	if errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("unknown outcome must not match ErrUnavailable: %v", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// A write whose connection died after sending has an unknown outcome.
func TestWriteConnectionLostIsUnknownOutcome(t *testing.T) {
	got := make(chan struct{})
	f := &fakeKV{put: func(ctx context.Context, _ *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
		close(got)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	addr, stop := startFake(t, f)
	c := fastClient(t, addr)
	go func() {
		<-got
		stop()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Put(ctx, "k", nil)
	if !errors.Is(err, client.ErrUnknownOutcome) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnknownOutcome", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the client waited for the deadline instead of failing on the lost connection")
	}
}

// Reads are retried on Unavailable, on another endpoint when there is one.
func TestReadRetriedOnOtherEndpoint(t *testing.T) {
	down := &fakeKV{rng: func(context.Context, *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
		return nil, dkverr.New(dkverr.Unavailable, "partitioned")
	}}
	up := &fakeKV{rng: func(_ context.Context, r *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
		return &dkvpb.RangeResponse{Kvs: []*dkvpb.KeyValue{{Key: r.Key, Value: []byte("v"), Version: 1}}, Count: 1}, nil
	}}
	a1, _ := startFake(t, down)
	a2, _ := startFake(t, up)
	c, err := client.New(context.Background(), client.Config{Endpoints: []string{a1, a2}, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Until the balancer has connected to both, every get may go to the
	// up endpoint; keep reading until the down one has refused at least
	// a few, each read still succeeding.
	deadline := time.Now().Add(10 * time.Second)
	for down.calls.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("round robin never tried the first endpoint; the test proves nothing")
		}
		kv, err := c.Get(context.Background(), "k")
		if err != nil || string(kv.Value) != "v" {
			t.Fatalf("get: %+v, %v", kv, err)
		}
	}
}

func TestNoReachableEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client.New(ctx, client.Config{Endpoints: []string{deadAddr(t)}, DialTimeout: 300 * time.Millisecond})
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	// Without waiting at dial, the first write fails before sending: it
	// is Unavailable, not an unknown outcome.
	c := fastClient(t, deadAddr(t))
	_, err = c.Put(ctx, "k", nil)
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("put to a dead endpoint: %v, want ErrUnavailable", err)
	}
	if _, err := client.New(ctx, client.Config{}); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("no endpoints: %v", err)
	}
}
