package bench

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A preload txn whose outcome is unknown (unavailable member, timeout,
// leader change) is tried again; one the server refused is not.
func TestPreloadTxnRetriesOnlyWhenItMayNotHaveApplied(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   codes.Code
	}{
		{"unavailable twice then ok", []error{status.Error(codes.Unavailable, "no leader"), status.Error(codes.Unavailable, "no leader"), nil}, 3, codes.OK},
		{"deadline then ok", []error{status.Error(codes.DeadlineExceeded, "outcome unknown: the raft leader changed"), nil}, 2, codes.OK},
		{"refused", []error{status.Error(codes.InvalidArgument, "too many ops")}, 1, codes.InvalidArgument},
		{"always unavailable", []error{status.Error(codes.Unavailable, "down"), status.Error(codes.Unavailable, "down"), status.Error(codes.Unavailable, "down"), status.Error(codes.Unavailable, "down"), status.Error(codes.Unavailable, "down")}, preloadAttempts, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := preloadTxn(ctx, time.Second, func(context.Context) error {
				calls++
				if calls > len(tc.errs) {
					t.Fatalf("call %d, only %d expected", calls, len(tc.errs))
				}
				return tc.errs[calls-1]
			})
			if calls != tc.wantCalls || status.Code(err) != tc.wantErr {
				t.Errorf("calls %d, err %v; want %d calls and code %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}

// A preload cut off part-way (its time bound, a failed member) goes on
// from where it stopped: a get over 20,000 keys whose first 13,000 are
// there, written in order by batches of 100, rewrites at most the last
// 64 batches it had written and then the 70 it had not, not all 200.
// A key space with holes below that point (written by random puts, say)
// is preloaded from its first key.
func TestPreloadResumesWhereItStopped(t *testing.T) {
	const keys, per = 20_000, preloadBatch
	for _, tc := range []struct {
		name     string
		written  func(k int) bool
		min, max int64 // txns the preload may write
	}{
		{"cut off after 130 batches", func(k int) bool { return k < 13_000 }, 200 - 130, 200 - 130 + 64},
		{"holes below the boundary", func(k int) bool { return k < 13_000 && (k/per)%5 != 1 }, 200, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep, kv := startServer(t)
			o := Options{Workload: "get", Endpoints: []string{ep}, Clients: 4, Total: 1, Keys: keys, KeyPrefix: "bench/"}
			env := &Env{Opts: &o}
			var ops []*dkvpb.RequestOp
			flush := func() {
				if len(ops) == 0 {
					return
				}
				if _, err := kv.Txn(context.Background(), &dkvpb.TxnRequest{Success: ops}); err != nil {
					t.Fatal(err)
				}
				ops = nil
			}
			for k := range keys {
				if tc.written(k) {
					ops = append(ops, &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{
						RequestPut: &dkvpb.PutRequest{Key: env.Key(k), Value: []byte("x")}}})
				}
				if (k+1)%per == 0 {
					flush()
				}
			}
			flush()
			before := revision(t, kv)
			if res := run(t, o); res.OK != 1 {
				t.Fatalf("get after the preload: ok=%d errors=%v", res.OK, res.Errors)
			}
			txns := revision(t, kv) - before
			got, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("bench/"), Prefix: true, CountOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != keys {
				t.Fatalf("%d keys after the preload, want %d", got.Count, keys)
			}
			if txns < tc.min || txns > tc.max {
				t.Fatalf("the preload wrote %d txns, want %d to %d", txns, tc.min, tc.max)
			}
		})
	}
}
