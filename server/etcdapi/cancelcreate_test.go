package etcdapi_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/dkv-io/dkv/server/etcdapi"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestCancelWhileCreatingLeavesNoKey: a caller of Lock or Campaign that
// cancels while the txn creating its key is in flight must not leave
// that key behind. The txn commits, but the caller never learns the
// key; left there, it would hold the lock (or the candidacy) until its
// lease ends. The test makes the race certain: the lock and election
// services run on a server of their own whose connection to the node
// lets the create commit, then cancels the caller and reports the
// reply as lost to the cancellation if the create was still tied to
// the caller's context.
func TestCancelWhileCreatingLeavesNoKey(t *testing.T) {
	n := startNode(t)
	var (
		armed      atomic.Bool
		handlerCtx atomic.Pointer[context.Context]
		cancelCall atomic.Pointer[context.CancelFunc]
	)
	loseReply := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method != "/etcdserverpb.KV/Txn" || !armed.CompareAndSwap(true, false) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err := invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...); err != nil {
			return err
		}
		// Committed. The caller gives up now, before it has the reply.
		(*cancelCall.Load())()
		<-(*handlerCtx.Load()).Done()
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		return nil
	}
	capture := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		handlerCtx.Store(&ctx)
		return h(ctx, req)
	}
	gs := grpc.NewServer(grpc.UnaryInterceptor(capture))
	etcdapi.Register(gs, etcdapi.Deps{Dial: func(context.Context) (*grpc.ClientConn, error) {
		return grpc.NewClient("passthrough:///"+n.s.ClientAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithUnaryInterceptor(loseReply))
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	for _, tc := range []struct {
		name string
		call func(ctx context.Context, lease int64) error
	}{
		{"lock", func(ctx context.Context, lease int64) error {
			_, err := v3lockpb.NewLockClient(conn).Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lock"), Lease: lease})
			return err
		}},
		{"election", func(ctx context.Context, lease int64) error {
			_, err := v3electionpb.NewElectionClient(conn).Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("election"), Lease: lease, Value: []byte("v")})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := grant(t, n, 3600) // outlives the test: only the service can remove the key
			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			cancelCall.Store(&cancel)
			armed.Store(true)
			if err := tc.call(ctx, lease); status.Code(err) != codes.Canceled {
				t.Fatalf("canceled call: %v", err)
			}
			if armed.Load() {
				t.Fatal("the create txn never ran")
			}
			waitGone(t, n, fmt.Sprintf("%s/%x", tc.name, lease))
		})
	}
}
