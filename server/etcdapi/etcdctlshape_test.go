package etcdapi_test

import (
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// Regression tests for differences from etcd found by the compat/etcd
// suite's etcdctl session against DKV: etcdctl -w json prints whole
// responses, so their shape is what a user sees.

// TestTxnOpHeaders: in etcd every op response inside a txn, nested txns
// included, carries a header with only the txn's revision; cluster,
// member and term are in the outer header alone.
func TestTxnOpHeaders(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("u"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	r, err := n.kv.Txn(ctx, &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{
		getOp("u"), putOp("v", "2"), delOp("u"),
		txnOp(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{getOp("v")}}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.GetClusterId() == 0 || r.Header.GetMemberId() == 0 || r.Header.GetRaftTerm() == 0 {
		t.Fatalf("outer header %v lacks cluster, member or term", r.Header)
	}
	want := &etcdserverpb.ResponseHeader{Revision: r.Header.Revision}
	var check func(ops []*etcdserverpb.ResponseOp)
	check = func(ops []*etcdserverpb.ResponseOp) {
		for i, op := range ops {
			var h *etcdserverpb.ResponseHeader
			switch o := op.Response.(type) {
			case *etcdserverpb.ResponseOp_ResponseRange:
				h = o.ResponseRange.Header
			case *etcdserverpb.ResponseOp_ResponsePut:
				h = o.ResponsePut.Header
			case *etcdserverpb.ResponseOp_ResponseDeleteRange:
				h = o.ResponseDeleteRange.Header
			case *etcdserverpb.ResponseOp_ResponseTxn:
				h = o.ResponseTxn.Header
				check(o.ResponseTxn.Responses)
			}
			if !proto.Equal(h, want) {
				t.Errorf("op %d: header %v, want %v (only the revision, as etcd)", i, h, want)
			}
		}
	}
	if len(r.Responses) != 4 {
		t.Fatalf("%d responses, want 4", len(r.Responses))
	}
	check(r.Responses)
}

// TestAuthEnableRootRole: etcdctl auth enable, on a root user without the
// root role, expects etcd's "root user does not have root role", then adds
// the role root, grants it and enables again.
func TestAuthEnableRootRole(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	a := etcdserverpb.NewAuthClient(n.conn)
	if _, err := a.UserAdd(ctx, &etcdserverpb.AuthUserAddRequest{Name: "root", Password: "rootpw"}); err != nil {
		t.Fatal(err)
	}
	_, err := a.AuthEnable(ctx, &etcdserverpb.AuthEnableRequest{})
	isErr(t, err, rpctypes.ErrGRPCRootRoleNotExist)
	if _, err := a.RoleAdd(ctx, &etcdserverpb.AuthRoleAddRequest{Name: "root"}); err != nil {
		t.Fatalf("role add root: %v", err)
	}
	if _, err := a.UserGrantRole(ctx, &etcdserverpb.AuthUserGrantRoleRequest{User: "root", Role: "root"}); err != nil {
		t.Fatalf("grant root: %v", err)
	}
	if _, err := a.AuthEnable(ctx, &etcdserverpb.AuthEnableRequest{}); err != nil {
		t.Fatalf("auth enable: %v", err)
	}
}
