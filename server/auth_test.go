package server

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/testutil"
	"google.golang.org/grpc/metadata"
)

// alice holds readwrite on prefix app/ and write only on wo/.
func aliceView(t *testing.T) *auth.User {
	t.Helper()
	st := &dkvpb.AuthState{
		Enabled: true,
		Users:   []*dkvpb.AuthUser{{Name: "alice", Roles: []string{"app", "wo"}}},
		Roles: []*dkvpb.AuthRole{
			{Name: "app", Permissions: []*dkvpb.Permission{{Type: dkvpb.Permission_READWRITE, Key: []byte("app/"), RangeEnd: []byte("app0")}}},
			{Name: "wo", Permissions: []*dkvpb.Permission{{Type: dkvpb.Permission_WRITE, Key: []byte("wo/"), RangeEnd: []byte("wo0")}}},
		},
	}
	u, ok := auth.NewView(st).User("alice")
	if !ok {
		t.Fatal("no alice")
	}
	return u
}

func allowedAll(u *auth.User, req any) error {
	needs, err := requirements(req, noLeases{})
	if err != nil {
		return err
	}
	for _, n := range needs {
		if err := allowed(u, n); err != nil {
			return err
		}
	}
	return nil
}

// noLeases is applied state with no lease keys or locks.
type noLeases struct{}

func (noLeases) LeaseKeys(int64, func([]byte) bool) error { return nil }
func (noLeases) LeaseLocks(int64) ([][]byte, error)       { return nil, nil }

// TestRequirements checks authorization item by item, at the level of the
// one table every path goes through: each request alice may not make is
// refused with PermissionDenied, each she may is allowed.
func TestRequirements(t *testing.T) {
	u := aliceView(t)
	k := func(s string) []byte { return []byte(s) }
	put := func(key string) *dkvpb.RequestOp {
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: k(key)}}}
	}
	get := func(key string) *dkvpb.RequestOp {
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestRange{RequestRange: &dkvpb.RangeRequest{Key: k(key)}}}
	}
	for _, c := range []struct {
		name string
		req  any
		ok   bool
	}{
		{"get app/a", &dkvpb.RangeRequest{Key: k("app/a")}, true},
		{"get other/x", &dkvpb.RangeRequest{Key: k("other/x")}, false},
		{"prefix app/", &dkvpb.RangeRequest{Key: k("app/"), Prefix: true}, true},
		{"prefix empty", &dkvpb.RangeRequest{Prefix: true}, false},
		{"from-key app/", &dkvpb.RangeRequest{Key: k("app/"), RangeEnd: []byte{0}}, false},
		{"range crossing out of app/", &dkvpb.RangeRequest{Key: k("app/z"), RangeEnd: k("b")}, false},
		{"txn inside app/", &dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: k("app/a")}}, Success: []*dkvpb.RequestOp{put("app/b")}, Failure: []*dkvpb.RequestOp{get("app/c")}}, true},
		{"txn compare other/", &dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: k("other/x")}}, Success: []*dkvpb.RequestOp{put("app/b")}}, false},
		{"txn failure-branch get other/", &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{put("app/b")}, Failure: []*dkvpb.RequestOp{get("other/x")}}, false},
		{"txn put other/", &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{put("other/x")}}, false},
		{"nested txn put other/", &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestTxn{RequestTxn: &dkvpb.TxnRequest{Failure: []*dkvpb.RequestOp{put("other/x")}}}}}}, false},
		{"nested txn inside app/", &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestTxn{RequestTxn: &dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: k("app/a")}}, Success: []*dkvpb.RequestOp{put("app/b")}}}}}}, true},
		{"txn range compare leaving app/", &dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: k("app/"), RangeEnd: k("b")}}}, false},
		{"txn range compare inside app/", &dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: k("app/"), RangeEnd: k("app0")}}}, true},
		{"txn put prev_kv on write-only", &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: k("wo/a"), PrevKv: true}}}}}, false},
		{"txn delete prev_kv on write-only", &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: k("wo/a"), PrevKv: true}}}}}, false},
		{"put write-only", &dkvpb.PutRequest{Key: k("wo/a")}, true},
		{"put prev_kv write-only", &dkvpb.PutRequest{Key: k("wo/a"), PrevKv: true}, false},
		{"put if_absent write-only", &dkvpb.PutRequest{Key: k("wo/a"), IfAbsent: true}, false},
		{"put if_version write-only", &dkvpb.PutRequest{Key: k("wo/a"), IfVersion: 3}, false},
		{"put with lease app/", &dkvpb.PutRequest{Key: k("app/a"), Lease: 7}, true},
		{"put with lease other/", &dkvpb.PutRequest{Key: k("other/a"), Lease: 7}, false},
		{"put other/ fenced by a lock on app/", &dkvpb.PutRequest{Key: k("other/a"), Lock: &dkvpb.LockHandle{Key: k("app/l")}}, false},
		// A handle for another key needs read on
		// that key; a handle for the request's own key nothing more.
		{"put app/ fenced by a lock on other/", &dkvpb.PutRequest{Key: k("app/a"), Lock: &dkvpb.LockHandle{Key: k("other/l")}}, false},
		{"put app/ fenced by a lock on app/", &dkvpb.PutRequest{Key: k("app/a"), Lock: &dkvpb.LockHandle{Key: k("app/l")}}, true},
		{"put write-only with its own lock", &dkvpb.PutRequest{Key: k("wo/a"), Lock: &dkvpb.LockHandle{Key: k("wo/a")}}, true},
		{"put write-only fenced by a write-only lock", &dkvpb.PutRequest{Key: k("wo/a"), Lock: &dkvpb.LockHandle{Key: k("wo/l")}}, false},
		{"delete prefix app/ with a lock inside it", &dkvpb.DeleteRangeRequest{Key: k("app/"), Prefix: true, Lock: &dkvpb.LockHandle{Key: k("app/l")}}, true},
		{"delete prefix wo/ with a lock inside it", &dkvpb.DeleteRangeRequest{Key: k("wo/"), Prefix: true, Lock: &dkvpb.LockHandle{Key: k("wo/l")}}, true},
		{"delete app/a fenced by a lock on other/", &dkvpb.DeleteRangeRequest{Key: k("app/a"), Lock: &dkvpb.LockHandle{Key: k("other/l")}}, false},
		{"get app/a fenced by a lock on other/", &dkvpb.RangeRequest{Key: k("app/a"), Lock: &dkvpb.LockHandle{Key: k("other/l")}}, false},
		{"counter app/ fenced by a lock on other/", &dkvpb.CounterRequest{Key: k("app/n"), Delta: 1, Lock: &dkvpb.LockHandle{Key: k("other/l")}}, false},
		{"txn LOCK compare on app/ with a handle on other/", &dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: k("app/a"), Target: dkvpb.Compare_LOCK, TargetUnion: &dkvpb.Compare_Lock{Lock: &dkvpb.LockHandle{Key: k("other/l")}}}}}, false},
		{"txn put app/ fenced by a lock on other/", &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: k("app/a"), Lock: &dkvpb.LockHandle{Key: k("other/l")}}}}}}, false},
		{"delete prefix other/", &dkvpb.DeleteRangeRequest{Key: k("other/"), Prefix: true}, false},
		{"delete prev_kv write-only", &dkvpb.DeleteRangeRequest{Key: k("wo/a"), PrevKv: true}, false},
		{"counter write-only", &dkvpb.CounterRequest{Key: k("wo/n"), Delta: 1}, false},
		{"counter app/", &dkvpb.CounterRequest{Key: k("app/n"), Delta: 1}, true},
		{"lock acquire app/", &dkvpb.LockAcquireRequest{Key: k("app/l")}, true},
		{"lock acquire other/", &dkvpb.LockAcquireRequest{Key: k("other/l")}, false},
		{"lock release other/", &dkvpb.LockReleaseRequest{Handle: &dkvpb.LockHandle{Key: k("other/l")}}, false},
		{"lock cancel other/", &dkvpb.LockCancelRequest{Key: k("other/l")}, false},
		{"lock describe other/", &dkvpb.LockDescribeRequest{Key: k("other/l")}, false},
		{"queue claim app/", &dkvpb.QueueClaimRequest{QueuePrefix: k("app/q/")}, true},
		{"queue claim other/", &dkvpb.QueueClaimRequest{QueuePrefix: k("other/q/")}, false},
		{"queue claim write-only", &dkvpb.QueueClaimRequest{QueuePrefix: k("wo/q/")}, false},
		{"queue claim with an ack app/", &dkvpb.QueueClaimRequest{QueuePrefix: k("app/q/"), Acks: []*dkvpb.QueueAckRequest{{Handle: &dkvpb.LockHandle{Key: k("app/q/j/1")}, MarkerKey: k("app/q/c/1")}}}, true},
		{"queue claim with an ack on other/", &dkvpb.QueueClaimRequest{QueuePrefix: k("app/q/"), Acks: []*dkvpb.QueueAckRequest{{Handle: &dkvpb.LockHandle{Key: k("other/q/j/1")}, MarkerKey: k("other/q/c/1")}}}, false},
		{"queue ack app/", &dkvpb.QueueAckRequest{Handle: &dkvpb.LockHandle{Key: k("app/q/j/1")}, MarkerKey: k("app/q/c/1"), Puts: []*dkvpb.PutRequest{{Key: k("app/q/d/1")}}}, true},
		{"queue ack putting other/", &dkvpb.QueueAckRequest{Handle: &dkvpb.LockHandle{Key: k("app/q/j/1")}, MarkerKey: k("app/q/c/1"), Puts: []*dkvpb.PutRequest{{Key: k("other/x")}}}, false},
		{"queue ack marker other/", &dkvpb.QueueAckRequest{Handle: &dkvpb.LockHandle{Key: k("app/q/j/1")}, MarkerKey: k("other/c/1")}, false},
		{"queue ack batch app/", &dkvpb.QueueAckBatchRequest{Acks: []*dkvpb.QueueAckRequest{{Handle: &dkvpb.LockHandle{Key: k("app/q/j/1")}, MarkerKey: k("app/q/c/1")}, {Handle: &dkvpb.LockHandle{Key: k("app/q/j/2")}, MarkerKey: k("app/q/c/2")}}}, true},
		{"queue ack batch, one ack's put other/", &dkvpb.QueueAckBatchRequest{Acks: []*dkvpb.QueueAckRequest{{Handle: &dkvpb.LockHandle{Key: k("app/q/j/1")}, MarkerKey: k("app/q/c/1")}, {Handle: &dkvpb.LockHandle{Key: k("app/q/j/2")}, MarkerKey: k("app/q/c/2"), Puts: []*dkvpb.PutRequest{{Key: k("other/x")}}}}}, false},
		{"queue ack batch, one ack on other/", &dkvpb.QueueAckBatchRequest{Acks: []*dkvpb.QueueAckRequest{{Handle: &dkvpb.LockHandle{Key: k("app/q/j/1")}, MarkerKey: k("app/q/c/1")}, {Handle: &dkvpb.LockHandle{Key: k("other/q/j/2")}, MarkerKey: k("other/q/c/2")}}}, false},
		{"lease grant", &dkvpb.LeaseGrantRequest{TtlMs: 1000}, true},
		{"status", &dkvpb.StatusRequest{}, true},
		{"compact", &dkvpb.CompactRequest{Revision: 1}, false},
		{"hashkv", &dkvpb.HashKVRequest{}, false},
		{"member list", &dkvpb.MemberListRequest{}, false},
		{"member add", &dkvpb.MemberAddRequest{}, false},
		{"member promote", &dkvpb.MemberPromoteRequest{}, false},
		{"member remove", &dkvpb.MemberRemoveRequest{}, false},
		{"leader transfer", &dkvpb.LeaderTransferRequest{}, false},
		{"snapshot", &dkvpb.SnapshotRequest{}, false},
		{"user add", &dkvpb.UserAddRequest{Name: "x"}, false},
		{"pprof (no request)", nil, false},
		{"an unknown request", &dkvpb.Member{}, false},
	} {
		err := allowedAll(u, c.req)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case !c.ok && dkverr.CodeOf(err) != dkverr.PermissionDenied:
			t.Errorf("%s: %v, want PermissionDenied", c.name, err)
		}
	}
	root := &auth.User{Name: "root", Root: true}
	if err := allowedAll(root, &dkvpb.MemberRemoveRequest{}); err != nil {
		t.Errorf("root refused member remove: %v", err)
	}
}

// BenchmarkCheckPut is the per-request cost of auth on a put: token
// verification plus the permission check, against the in-memory view.
func BenchmarkCheckPut(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	st := &dkvpb.AuthState{Enabled: true, SigningKey: key,
		Users: []*dkvpb.AuthUser{{Name: "alice", Roles: []string{"app"}}},
		Roles: []*dkvpb.AuthRole{{Name: "app", Permissions: []*dkvpb.Permission{{Type: dkvpb.Permission_READWRITE, Key: []byte("app/"), RangeEnd: []byte("app0")}}}}}
	v := auth.NewView(st)
	tok, err := auth.Sign(key, "alice", 0, time.Now().Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{log: testutil.Quiet}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("token", tok))
	req := &dkvpb.PutRequest{Key: []byte("app/k"), Value: []byte("v")}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := s.checkView(ctx, v, dkvpb.KV_Put_FullMethodName, req); err != nil {
			b.Fatal(err)
		}
	}
}
