package server

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// A member's status says the quota it enforces, so a page served by
// another member (the dashboard's cluster page) can show db size against
// it: each member has its own --quota-bytes.
func TestStatusReportsQuota(t *testing.T) {
	for _, quota := range []int64{0, 3 << 30} {
		_, _, conn := startHTTPTestServer(t, Config{QuotaBytes: quota})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := dkvpb.NewClusterClient(conn).Status(ctx, &dkvpb.StatusRequest{})
		cancel()
		if err != nil || st.QuotaBytes != quota {
			t.Fatalf("status with --quota-bytes %d: %v %v, want quota_bytes %d", quota, st, err, quota)
		}
	}
}
