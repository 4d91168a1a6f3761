package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An error's text names its kind once: a message that already says "not
// found" is not prefixed with "not found: " again.
func TestErrorTextSaysItsKindOnce(t *testing.T) {
	for _, tc := range []struct {
		err  *client.Error
		want string
	}{
		{&client.Error{Kind: client.ErrNotFound, Msg: `key "x" not found`}, `key "x" not found`},
		{&client.Error{Kind: client.ErrLocked, Msg: `key "k" is locked (fencing token 4)`}, `key "k" is locked (fencing token 4)`},
		{&client.Error{Kind: client.ErrCompacted, Msg: "revision 1 has been compacted (compact revision 3)"}, "revision 1 has been compacted (compact revision 3)"},
		{&client.Error{Kind: client.ErrLeaseNotFound, Msg: "lease 7 not found"}, "lease 7 not found"},
		// A message that does not say it keeps the kind in front.
		{&client.Error{Kind: client.ErrConflict, Msg: `key "x" has version 2, not 7`}, `conflict: key "x" has version 2, not 7`},
		{&client.Error{Kind: client.ErrUnavailable, Msg: "no leader"}, "unavailable: no leader"},
		{&client.Error{Kind: client.ErrNotFound}, "not found"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%#v.Error() = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A server-side DeadlineExceeded whose message is the context error's own
// text is reported once, not "context deadline exceeded (context deadline
// exceeded)".
func TestDeadlineFromServerSaidOnce(t *testing.T) {
	f := &fakeKV{rng: func(context.Context, *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
		return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	}}
	addr, _ := startFake(t, f)
	c := fastClient(t, addr)
	_, err := c.Get(context.Background(), "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get: %v, want DeadlineExceeded", err)
	}
	if n := strings.Count(err.Error(), "deadline exceeded"); n != 1 {
		t.Errorf("error text %q says \"deadline exceeded\" %d times", err, n)
	}
}
