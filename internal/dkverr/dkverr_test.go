package dkverr

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/status"
)

func TestRoundTripThroughGRPCStatus(t *testing.T) {
	for c := NotFound; c <= PermissionDenied; c++ {
		orig := New(c, "key %q: boom", "a")
		st, ok := status.FromError(orig)
		if !ok {
			t.Fatalf("%v: not a status", c)
		}
		if st.Code() != c.GRPCCode() {
			t.Fatalf("%v: grpc code %v, want %v", c, st.Code(), c.GRPCCode())
		}
		back := FromGRPC(st.Err())
		if CodeOf(back) != c {
			t.Fatalf("%v: decoded as %v", c, CodeOf(back))
		}
		if !errors.Is(back, Sentinel(c)) {
			t.Fatalf("%v: errors.Is against sentinel failed", c)
		}
		if c != NotFound && errors.Is(back, Sentinel(NotFound)) {
			t.Fatalf("%v matched NotFound sentinel", c)
		}
		if back.(*Error).Msg != `key "a": boom` {
			t.Fatalf("message lost: %q", back.(*Error).Msg)
		}
	}
}

func TestWrappedErrorKeepsCode(t *testing.T) {
	err := fmt.Errorf("put: %w", New(Locked, "key is locked"))
	if CodeOf(err) != Locked || !errors.Is(err, Sentinel(Locked)) {
		t.Fatalf("wrapped Locked not recognised: %v", err)
	}
	if CodeOf(nil) != OK || CodeOf(errors.New("x")) != Internal {
		t.Fatal("nil must be OK and foreign errors Internal")
	}
}
