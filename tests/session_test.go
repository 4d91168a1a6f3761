package tests

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lostReplies is a client interceptor that, on every nth write to the
// KV service, lets the write reach the store and then drops its reply:
// what a client sees when the leader dies after committing a write and
// before answering. The client reports ErrUnknownOutcome for it.
type lostReplies struct {
	every int64
	n     atomic.Int64
	lost  atomic.Int64
}

func (l *lostReplies) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if method != dkvpb.KV_Txn_FullMethodName && method != dkvpb.KV_Put_FullMethodName {
		return err
	}
	if err == nil && l.n.Add(1)%l.every == 0 {
		l.lost.Add(1)
		return status.Error(codes.Unavailable, "test: the reply was lost after the write committed")
	}
	return err
}

// lossyClientFor is clientFor whose writes lose every nth reply.
func lossyClientFor(t testing.TB, l *lostReplies, nodes ...*servertest.Node) *client.Client {
	t.Helper()
	var eps []string
	for _, nd := range nodes {
		eps = append(eps, nd.Srv.ClientAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: eps, AutoSyncInterval: -1,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(l.unary)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSessionUpdateExactUnderLeaderKill: 200
// goroutines across two instances (two clients, each first talking to a
// different member of a 3-node cluster) each increment a counter in one
// session 50 times with Update while the leader is killed; the counter
// ends at exactly 10,000. Besides the kill, every 7th write of each
// instance has its reply dropped after it committed, so Update must
// learn by itself whether its write landed instead of writing again.
func TestSessionUpdateExactUnderLeaderKill(t *testing.T) {
	c3 := servertest.NewCluster(t, 3, server.Config{})
	l := c3.WaitLeader()
	var others []*servertest.Node
	for _, nd := range c3.Nodes {
		if nd != l {
			others = append(others, nd)
		}
	}
	// Instance A starts at the leader (its connection dies with it),
	// instance B at a follower; each knows every member.
	loss := []*lostReplies{{every: 7}, {every: 7}}
	ca := lossyClientFor(t, loss[0], l, others[0], others[1])
	cb := lossyClientFor(t, loss[1], others[0], others[1], l)
	var stores []*recipe.SessionStore
	for _, c := range []*client.Client{ca, cb} {
		s, err := recipe.NewSessionStore(c)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const goroutines, increments = 200, 50
	var (
		done     atomic.Int64 // Updates that returned nil
		unknowns atomic.Int64 // Updates that returned ErrUnknownOutcome
		refused  atomic.Int64 // Updates that returned another error (not applied), retried
		wg       sync.WaitGroup
	)
	incr := func(old []byte) ([]byte, error) {
		n := 0
		if old != nil {
			var err error
			if n, err = strconv.Atoi(string(old)); err != nil {
				return nil, err
			}
		}
		return []byte(strconv.Itoa(n + 1)), nil
	}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for range increments {
				for {
					_, err := s.Update(ctx, "cart-1", incr)
					if err == nil {
						done.Add(1)
						break
					}
					if ctx.Err() != nil {
						return
					}
					if errors.Is(err, client.ErrUnknownOutcome) {
						// The caller cannot tell; retrying is what a
						// web handler would do, and would double-count.
						unknowns.Add(1)
					} else {
						refused.Add(1)
					}
				}
			}
		}()
	}
	// Kill the leader once a third of the increments are in.
	testutil.Eventually(t, 2*time.Minute, "a third of the increments", func() bool {
		return done.Load() >= goroutines*increments/3
	})
	c3.Stop(l)
	t.Logf("killed leader %s after %d increments", l.Name, done.Load())
	wg.Wait()

	t.Logf("%d Updates returned nil, %d an unknown outcome, %d another error (retried); %d+%d replies dropped",
		done.Load(), unknowns.Load(), refused.Load(), loss[0].lost.Load(), loss[1].lost.Load())
	if n := unknowns.Load(); n > 0 {
		t.Errorf("Update returned ErrUnknownOutcome %d times: it must learn its write's outcome itself", n)
	}
	if loss[0].lost.Load()+loss[1].lost.Load() == 0 {
		t.Fatal("no reply was dropped: the test exercised nothing")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	data, found, err := stores[1].Get(rctx, "cart-1")
	if err != nil || !found || string(data) != strconv.Itoa(goroutines*increments) {
		t.Fatalf("counter %q (found %v, %v), want exactly %d", data, found, err, goroutines*increments)
	}
}
