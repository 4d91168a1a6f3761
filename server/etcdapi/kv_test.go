package etcdapi_test

import (
	"fmt"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// seed writes a=1 (rev 2), b=2 (3), c=3 (4), a=11 (5), d=4 (6): a fresh
// node is at revision 1, as etcd is.
func seed(t *testing.T, n *node) {
	t.Helper()
	ctx := ctxT(t)
	for i, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}, {"a", "11"}, {"d", "4"}} {
		resp, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte(kv[0]), Value: []byte(kv[1])})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision != int64(i+2) {
			t.Fatalf("put %d: revision %d", i, resp.Header.Revision)
		}
	}
}

// show is kvs as key=value@create/mod/version.
func show(kvs []*mvccpb.KeyValue) string {
	var b []string
	for _, kv := range kvs {
		b = append(b, fmt.Sprintf("%s=%s@%d/%d/%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version))
	}
	return strings.Join(b, " ")
}

func TestRange(t *testing.T) {
	n := startNode(t)
	seed(t, n)
	ctx := ctxT(t)
	all := []byte{0}
	for _, tc := range []struct {
		name  string
		req   *etcdserverpb.RangeRequest
		kvs   string
		count int64
		more  bool
	}{
		{"one key", &etcdserverpb.RangeRequest{Key: []byte("a")}, "a=11@2/5/2", 1, false},
		{"missing key", &etcdserverpb.RangeRequest{Key: []byte("zz")}, "", 0, false},
		{"range", &etcdserverpb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c")}, "a=11@2/5/2 b=2@3/3/1", 2, false},
		{"from key", &etcdserverpb.RangeRequest{Key: []byte("b"), RangeEnd: all}, "b=2@3/3/1 c=3@4/4/1 d=4@6/6/1", 3, false},
		{"all keys", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all}, "a=11@2/5/2 b=2@3/3/1 c=3@4/4/1 d=4@6/6/1", 4, false},
		{"limit", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, Limit: 2}, "a=11@2/5/2 b=2@3/3/1", 4, true},
		{"limit exact", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, Limit: 4}, "a=11@2/5/2 b=2@3/3/1 c=3@4/4/1 d=4@6/6/1", 4, false},
		{"past revision", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, Revision: 4}, "a=1@2/2/1 b=2@3/3/1 c=3@4/4/1", 3, false},
		{"sort mod descend", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, SortOrder: etcdserverpb.RangeRequest_DESCEND, SortTarget: etcdserverpb.RangeRequest_MOD}, "d=4@6/6/1 a=11@2/5/2 c=3@4/4/1 b=2@3/3/1", 4, false},
		{"sort key descend limit", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, Limit: 2, SortOrder: etcdserverpb.RangeRequest_DESCEND}, "d=4@6/6/1 c=3@4/4/1", 4, true},
		{"sort target without order ascends", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, SortTarget: etcdserverpb.RangeRequest_VALUE}, "a=11@2/5/2 b=2@3/3/1 c=3@4/4/1 d=4@6/6/1", 4, false},
		{"keys only", &etcdserverpb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), KeysOnly: true}, "a=@2/5/2 b=@3/3/1", 2, false},
		{"count only", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, CountOnly: true}, "", 4, false},
		{"serializable", &etcdserverpb.RangeRequest{Key: []byte("b"), Serializable: true}, "b=2@3/3/1", 1, false},
		{"min mod", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, MinModRevision: 5}, "a=11@2/5/2 d=4@6/6/1", 4, false},
		{"min mod limit after filter", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, MinModRevision: 5, Limit: 1}, "a=11@2/5/2", 4, true},
		{"max mod", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, MaxModRevision: 4}, "b=2@3/3/1 c=3@4/4/1", 4, false},
		{"min create", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, MinCreateRevision: 4}, "c=3@4/4/1 d=4@6/6/1", 4, false},
		{"max create", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, MaxCreateRevision: 3}, "a=11@2/5/2 b=2@3/3/1", 4, false},
		{"filters sorted", &etcdserverpb.RangeRequest{Key: all, RangeEnd: all, MinCreateRevision: 3, SortOrder: etcdserverpb.RangeRequest_DESCEND, SortTarget: etcdserverpb.RangeRequest_CREATE, Limit: 2}, "d=4@6/6/1 c=3@4/4/1", 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := n.kv.Range(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := show(resp.Kvs); got != tc.kvs || resp.Count != tc.count || resp.More != tc.more {
				t.Fatalf("got %q count %d more %v, want %q count %d more %v", got, resp.Count, resp.More, tc.kvs, tc.count, tc.more)
			}
			h := resp.Header
			wantRev := int64(6)
			if h.Revision != wantRev || h.ClusterId == 0 || h.MemberId == 0 || h.RaftTerm == 0 {
				t.Fatalf("header %v", h)
			}
		})
	}
}

// isErr asserts err is etcd's error want: same code and message.
func isErr(t *testing.T, err, want error) {
	t.Helper()
	if status.Code(err) != status.Code(want) || rpctypes.ErrorDesc(err) != rpctypes.ErrorDesc(want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

func TestKVErrors(t *testing.T) {
	n := startNode(t)
	seed(t, n)
	ctx := ctxT(t)
	_, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("a"), Revision: 99})
	isErr(t, err, rpctypes.ErrGRPCFutureRev)
	_, err = n.kv.Range(ctx, &etcdserverpb.RangeRequest{})
	isErr(t, err, rpctypes.ErrGRPCEmptyKey)
	_, err = n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("x"), Lease: 12345})
	isErr(t, err, rpctypes.ErrGRPCLeaseNotFound)
	if _, err := n.kv.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: 4, Physical: true}); err != nil {
		t.Fatal(err)
	}
	_, err = n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("a"), Revision: 3})
	isErr(t, err, rpctypes.ErrGRPCCompacted)
	_, err = n.kv.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: 3})
	isErr(t, err, rpctypes.ErrGRPCCompacted)
	_, err = n.kv.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: 99})
	isErr(t, err, rpctypes.ErrGRPCFutureRev)
	// The compacted revision itself is still readable, as in etcd.
	if r, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("a"), Revision: 4}); err != nil || show(r.Kvs) != "a=1@2/2/1" {
		t.Fatalf("range at the compacted revision: %v %v", r, err)
	}
}

func TestPutDelete(t *testing.T) {
	n := startNode(t)
	seed(t, n)
	ctx := ctxT(t)
	g, err := n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	p, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("a"), Value: []byte("12"), Lease: g.ID, PrevKv: true})
	if err != nil || show([]*mvccpb.KeyValue{p.PrevKv}) != "a=11@2/5/2" || p.Header.Revision != 7 {
		t.Fatalf("put prev_kv: %v %v", p, err)
	}
	// ignore_value keeps the value; the lease is replaced (here: none).
	if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("a"), IgnoreValue: true}); err != nil {
		t.Fatal(err)
	}
	r, _ := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("a")})
	if show(r.Kvs) != "a=12@2/8/4" || r.Kvs[0].Lease != 0 {
		t.Fatalf("after ignore_value: %v", r.Kvs)
	}
	// ignore_lease keeps the lease.
	if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("b"), Value: []byte("x"), Lease: g.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("b"), Value: []byte("y"), IgnoreLease: true}); err != nil {
		t.Fatal(err)
	}
	r, _ = n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("b")})
	if show(r.Kvs) != "b=y@3/10/3" || r.Kvs[0].Lease != g.ID {
		t.Fatalf("after ignore_lease: %v", r.Kvs)
	}
	for _, tc := range []struct {
		req  *etcdserverpb.PutRequest
		want error
	}{
		{&etcdserverpb.PutRequest{Key: []byte("nokey"), IgnoreLease: true}, rpctypes.ErrGRPCKeyNotFound},
		{&etcdserverpb.PutRequest{Key: []byte("nokey"), IgnoreValue: true}, rpctypes.ErrGRPCKeyNotFound},
		{&etcdserverpb.PutRequest{Key: []byte("b"), IgnoreLease: true, Lease: g.ID}, rpctypes.ErrGRPCLeaseProvided},
		{&etcdserverpb.PutRequest{Key: []byte("b"), IgnoreValue: true, Value: []byte("v")}, rpctypes.ErrGRPCValueProvided},
		{&etcdserverpb.PutRequest{Value: []byte("v")}, rpctypes.ErrGRPCEmptyKey},
	} {
		_, err := n.kv.Put(ctx, tc.req)
		isErr(t, err, tc.want)
	}
	d, err := n.kv.DeleteRange(ctx, &etcdserverpb.DeleteRangeRequest{Key: []byte("b"), RangeEnd: []byte("d"), PrevKv: true})
	if err != nil || d.Deleted != 2 || show(d.PrevKvs) != "b=y@3/10/3 c=3@4/4/1" || d.Header.Revision != 11 {
		t.Fatalf("delete range: %v %v", d, err)
	}
	d, err = n.kv.DeleteRange(ctx, &etcdserverpb.DeleteRangeRequest{Key: []byte("b")})
	if err != nil || d.Deleted != 0 || d.Header.Revision != 11 {
		t.Fatalf("delete of a missing key: %v %v", d, err)
	}
}

// TestLockedKeyRefused: a key locked through DKV's lock API refuses an
// etcd write that does not carry the lock's handle (etcd has no way to
// send one), with FailedPrecondition and a message naming the lock.
func TestLockedKeyRefused(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	lk, err := dkvpb.NewLockClient(n.conn).Acquire(ctx, &dkvpb.LockAcquireRequest{Key: []byte("jobs/1"), TtlMs: 60000})
	if err != nil || !lk.Acquired {
		t.Fatalf("acquire: %v %v", lk, err)
	}
	// Under the lock's handle (DKV's API) a write goes through.
	if _, err := n.dkv.Put(ctx, &dkvpb.PutRequest{Key: []byte("jobs/1"), Value: []byte("mine"), Lock: lk.Handle}); err != nil {
		t.Fatal(err)
	}
	_, err = n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("jobs/1"), Value: []byte("x")})
	if status.Code(err) != codes.FailedPrecondition || !strings.HasPrefix(rpctypes.ErrorDesc(err), "etcdserver: ") ||
		!strings.Contains(rpctypes.ErrorDesc(err), `key "jobs/1" is locked`) {
		t.Fatalf("put to a locked key: %v", err)
	}
	_, err = n.kv.DeleteRange(ctx, &etcdserverpb.DeleteRangeRequest{Key: []byte("jobs/"), RangeEnd: []byte("jobs0")})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(rpctypes.ErrorDesc(err), "jobs/1") {
		t.Fatalf("delete over a locked key: %v", err)
	}
	_, err = n.kv.Txn(ctx, &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("jobs/1", "y")}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("txn put to a locked key: %v", err)
	}
	// Nothing the refused writes carried was applied.
	r, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("jobs/1")})
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "mine" {
		t.Fatalf("read: %v %v", r, err)
	}
}
