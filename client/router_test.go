package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"google.golang.org/grpc"
)

// hungServer, once stalled, accepts requests but never answers, like a
// member stopped with SIGSTOP whose kernel still holds its sockets.
type hungServer struct {
	dkvpb.UnimplementedKVServer
	dkvpb.UnimplementedClusterServer
	stalled      atomic.Bool
	puts, ranges atomic.Int64
	release      chan struct{}
}

func (h *hungServer) Put(ctx context.Context, _ *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
	if !h.stalled.Load() {
		return &dkvpb.PutResponse{}, nil
	}
	h.puts.Add(1)
	return nil, h.wait(ctx)
}

func (h *hungServer) Range(ctx context.Context, r *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	h.ranges.Add(1)
	if !h.stalled.Load() {
		return &dkvpb.RangeResponse{Kvs: []*dkvpb.KeyValue{{Key: r.Key, Value: []byte("v")}}, Count: 1}, nil
	}
	return nil, h.wait(ctx)
}

func (h *hungServer) Status(ctx context.Context, _ *dkvpb.StatusRequest) (*dkvpb.StatusResponse, error) {
	if !h.stalled.Load() {
		return &dkvpb.StatusResponse{}, nil
	}
	return nil, h.wait(ctx)
}

func (h *hungServer) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.release:
		return errors.New("released")
	}
}

func startGRPC(t *testing.T, kv dkvpb.KVServer, cl dkvpb.ClusterServer) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	dkvpb.RegisterKVServer(s, kv)
	dkvpb.RegisterClusterServer(s, cl)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// Requests in flight on an endpoint that stops answering are given up
// long before their deadline: a read is retried on the other endpoint and
// succeeds; a write, which may have been applied, reports
// ErrUnknownOutcome and is not sent again. Later requests avoid the hung
// endpoint.
func TestHungEndpointIsRoutedAround(t *testing.T) {
	hung := &hungServer{release: make(chan struct{})}
	defer close(hung.release)
	var upPuts atomic.Int64
	up := &fakeKV{
		put: func(context.Context, *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
			upPuts.Add(1)
			return &dkvpb.PutResponse{Header: &dkvpb.ResponseHeader{Revision: 1}}, nil
		},
		rng: func(_ context.Context, r *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
			return &dkvpb.RangeResponse{Kvs: []*dkvpb.KeyValue{{Key: r.Key, Value: []byte("v")}}, Count: 1}, nil
		},
	}
	hungAddr := startGRPC(t, hung, hung)
	upAddr, _ := startFake(t, up)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{
		Endpoints:           []string{hungAddr, upAddr},
		RetryBackoff:        time.Millisecond,
		UnresponsiveTimeout: 400 * time.Millisecond,
		AutoSyncInterval:    -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Both endpoints in use, so that round robin sends some requests to
	// the one about to hang.
	for i := 0; hung.ranges.Load() == 0; i++ {
		if i > 1000 {
			t.Fatal("no read reached the second endpoint")
		}
		if _, err := c.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	hung.stalled.Store(true)
	hung.ranges.Store(0)
	var (
		wg              sync.WaitGroup
		ok, unknown     atomic.Int64
		readOK, readErr atomic.Int64
	)
	put := func(i int) {
		defer wg.Done()
		_, err := c.Put(ctx, "k", []byte{byte(i)})
		switch {
		case ctx.Err() != nil:
			t.Errorf("put waited for its deadline")
		case err == nil:
			ok.Add(1)
		case errors.Is(err, client.ErrUnknownOutcome) && !errors.Is(err, client.ErrUnavailable):
			unknown.Add(1)
			if !strings.Contains(err.Error(), hungAddr) {
				t.Errorf("unknown outcome does not name the endpoint: %v", err)
			}
		default:
			t.Errorf("put: %v", err)
		}
	}
	get := func() {
		defer wg.Done()
		kv, err := c.Get(ctx, "k")
		if err != nil || string(kv.Value) != "v" {
			readErr.Add(1)
			t.Errorf("get: %v %v", kv, err)
			return
		}
		readOK.Add(1)
	}
	// Round robin alternates endpoints; starting puts and gets in a fixed
	// put, get order would send every put to one endpoint and every get
	// to the other. Alternating the order gives each kind both endpoints.
	for i := range 8 {
		wg.Add(2)
		if i%2 == 0 {
			go put(i)
			go get()
		} else {
			go get()
			go put(i)
		}
	}
	wg.Wait()
	if hung.puts.Load() == 0 || hung.ranges.Load() == 0 {
		t.Fatalf("the hung endpoint got %d puts and %d reads; the test proves nothing", hung.puts.Load(), hung.ranges.Load())
	}
	// Each write was sent once: those to the hung endpoint are unknown,
	// the others applied; none was retried behind the caller's back.
	if unknown.Load() != hung.puts.Load() || ok.Load() != upPuts.Load() || ok.Load()+unknown.Load() != 8 {
		t.Fatalf("%d ok + %d unknown; hung endpoint saw %d puts, the live one %d", ok.Load(), unknown.Load(), hung.puts.Load(), upPuts.Load())
	}
	// Now known to be hung, it gets no more requests.
	before := hung.puts.Load() + hung.ranges.Load()
	for i := range 20 {
		if _, err := c.Put(ctx, "k", []byte{byte(i)}); err != nil {
			t.Fatalf("put after the hang was noticed: %v", err)
		}
		if _, err := c.Get(ctx, "k"); err != nil {
			t.Fatalf("get after the hang was noticed: %v", err)
		}
	}
	if after := hung.puts.Load() + hung.ranges.Load(); after != before {
		t.Fatalf("%d requests still went to the hung endpoint", after-before)
	}
}

// With FailFast, New reports why no endpoint can be reached, at once,
// instead of waiting for DialTimeout and saying "context deadline
// exceeded". Without it, it waits (the cluster may be starting) but still
// names the cause.
func TestNewFailsFastWithTheCause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := client.New(ctx, client.Config{Endpoints: []string{deadAddr(t), deadAddr(t)}, DialTimeout: time.Hour, FailFast: true})
	if ctx.Err() != nil {
		t.Fatal("New waited for the deadline")
	}
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v, want ErrUnavailable naming connection refused", err)
	}
	_, err = client.New(ctx, client.Config{Endpoints: []string{deadAddr(t)}, DialTimeout: 300 * time.Millisecond})
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("without FailFast: got %v, want ErrUnavailable naming connection refused", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7861":         "127.0.0.1:7861",
		" host:1 ":               "host:1",
		"http://127.0.0.1:7861":  "127.0.0.1:7861",
		"HTTP://127.0.0.1:7861/": "127.0.0.1:7861",
		"[::1]:7861":             "[::1]:7861",
	} {
		if got, err := client.ParseEndpoint(in); err != nil || got != want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":                       "empty",
		"localhost":              "missing port",
		"127.0.0.1:":             "port",
		"127.0.0.1:70000":        "port",
		":7861":                  "no host",
		"https://127.0.0.1:7861": "TLS",
		"unix:///tmp/s":          "scheme",
	} {
		_, err := client.ParseEndpoint(in)
		if !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEndpoint(%q): %v; want ErrInvalidInput naming %q", in, err, want)
		}
	}
	if _, err := client.New(context.Background(), client.Config{Endpoints: []string{"localhost"}}); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("New with a port-less endpoint: %v", err)
	}
}

// dropFirst accepts and closes its first connection (a handshake lost on
// a loaded machine), then hands the rest to the server.
type dropFirst struct {
	net.Listener
	dropped atomic.Bool
}

func (l *dropFirst) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.dropped.Swap(true) {
			return c, err
		}
		c.Close()
	}
}

// With FailFast, one dropped connection is not fatal: New tries again
// after a short backoff (the CLI's `dkv queue list` failed in CI with "no
// endpoint reachable" when a single handshake was lost).
func TestFailFastSurvivesOneDroppedConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeKV{}
	s := grpc.NewServer()
	dkvpb.RegisterKVServer(s, f)
	dkvpb.RegisterClusterServer(s, f)
	go s.Serve(&dropFirst{Listener: l})
	t.Cleanup(s.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{l.Addr().String()}, DialTimeout: 20 * time.Second, FailFast: true, AutoSyncInterval: -1})
	if err != nil {
		t.Fatalf("New after one dropped connection: %v", err)
	}
	c.Close()
}
