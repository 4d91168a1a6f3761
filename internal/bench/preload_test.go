package bench

import (
	"context"
	"testing"
	"time"

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
