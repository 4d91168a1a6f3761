package etcdapi_test

import (
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func putOp(k, v string) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func getOp(k string) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{Key: []byte(k)}}}
}

func delOp(k string) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: []byte(k), PrevKv: true}}}
}

func txnOp(t *etcdserverpb.TxnRequest) *etcdserverpb.RequestOp {
	return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestTxn{RequestTxn: t}}
}

func cmpOf(key, end string, target etcdserverpb.Compare_CompareTarget, result etcdserverpb.Compare_CompareResult, v any) *etcdserverpb.Compare {
	c := &etcdserverpb.Compare{Key: []byte(key), Target: target, Result: result}
	if end != "" {
		c.RangeEnd = []byte(end)
	}
	switch target {
	case etcdserverpb.Compare_VALUE:
		c.TargetUnion = &etcdserverpb.Compare_Value{Value: []byte(v.(string))}
	case etcdserverpb.Compare_VERSION:
		c.TargetUnion = &etcdserverpb.Compare_Version{Version: int64(v.(int))}
	case etcdserverpb.Compare_CREATE:
		c.TargetUnion = &etcdserverpb.Compare_CreateRevision{CreateRevision: int64(v.(int))}
	case etcdserverpb.Compare_MOD:
		c.TargetUnion = &etcdserverpb.Compare_ModRevision{ModRevision: int64(v.(int))}
	case etcdserverpb.Compare_LEASE:
		c.TargetUnion = &etcdserverpb.Compare_Lease{Lease: int64(v.(int))}
	}
	return c
}

// showTxn is a txn response as etcdctl would summarise it: SUCCESS or
// FAILURE, then each op's result, nested txns in brackets.
func showTxn(r *etcdserverpb.TxnResponse) string {
	out := "FAILURE"
	if r.Succeeded {
		out = "SUCCESS"
	}
	for _, op := range r.Responses {
		switch o := op.Response.(type) {
		case *etcdserverpb.ResponseOp_ResponsePut:
			out += " put"
		case *etcdserverpb.ResponseOp_ResponseRange:
			out += " get[" + show(o.ResponseRange.Kvs) + "]"
		case *etcdserverpb.ResponseOp_ResponseDeleteRange:
			out += fmt.Sprintf(" del%d", o.ResponseDeleteRange.Deleted)
		case *etcdserverpb.ResponseOp_ResponseTxn:
			out += " txn[" + showTxn(o.ResponseTxn) + "]"
		}
	}
	return out
}

func TestTxn(t *testing.T) {
	const (
		eq = etcdserverpb.Compare_EQUAL
		gt = etcdserverpb.Compare_GREATER
		lt = etcdserverpb.Compare_LESS
		ne = etcdserverpb.Compare_NOT_EQUAL

		value   = etcdserverpb.Compare_VALUE
		version = etcdserverpb.Compare_VERSION
		create  = etcdserverpb.Compare_CREATE
		mod     = etcdserverpb.Compare_MOD
		lease   = etcdserverpb.Compare_LEASE
	)
	ok := []*etcdserverpb.RequestOp{getOp("b")}
	for _, tc := range []struct {
		name string
		txn  *etcdserverpb.TxnRequest
		want string
		// rev is the revision after the txn (6 before it).
		rev int64
	}{
		{"value equal", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "", value, eq, "11")}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"value greater", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "", value, gt, "2")}, Success: ok}, "FAILURE", 6},
		{"version greater", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "", version, gt, 1)}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"missing key version 0", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("zz", "", version, eq, 0)}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"create equal", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("b", "", create, eq, 3)}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"mod less fails to failure", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("c", "", mod, lt, 4)}, Success: ok, Failure: []*etcdserverpb.RequestOp{getOp("c")}}, "FAILURE get[c=3@4/4/1]", 6},
		{"lease equal none", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "", lease, eq, 0)}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"lease not equal", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "", lease, ne, 0)}, Success: ok}, "FAILURE", 6},
		{"range version all 1 fails (a is 2)", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "e", version, eq, 1)}, Success: ok}, "FAILURE", 6},
		{"range version all 1 holds from b", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("b", "\x00", version, eq, 1)}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"range mod greater", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "e", mod, gt, 2)}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"empty range value fails", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("x", "y", value, eq, "")}, Success: ok}, "FAILURE", 6},
		{"empty range create 0 holds", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("x", "y", create, eq, 0)}, Success: ok}, "SUCCESS get[b=2@3/3/1]", 6},
		{"no compares runs success, one revision for all writes",
			&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("p", "1"), putOp("q", "2"), getOp("p"), delOp("c")}},
			"SUCCESS put put get[p=1@7/7/1] del1", 7},
		{"nested txn",
			&etcdserverpb.TxnRequest{
				Compare: []*etcdserverpb.Compare{cmpOf("a", "", value, eq, "11")},
				Success: []*etcdserverpb.RequestOp{
					putOp("n0", "x"),
					txnOp(&etcdserverpb.TxnRequest{
						Compare: []*etcdserverpb.Compare{cmpOf("b", "", value, eq, "nope")},
						Success: []*etcdserverpb.RequestOp{putOp("n1", "s")},
						Failure: []*etcdserverpb.RequestOp{putOp("n1", "f"), getOp("n0"), txnOp(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{getOp("n1")}})},
					}),
				}},
			"SUCCESS put txn[FAILURE put get[n0=x@7/7/1] txn[SUCCESS get[n1=f@7/7/1]]]", 7},
		{"nested compares see the state before the txn",
			&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{
				putOp("a", "new"),
				txnOp(&etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{cmpOf("a", "", value, eq, "11")}, Success: []*etcdserverpb.RequestOp{getOp("a")}}),
			}},
			"SUCCESS put txn[SUCCESS get[a=new@2/7/3]]", 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t)
			seed(t, n)
			ctx := ctxT(t)
			resp, err := n.kv.Txn(ctx, tc.txn)
			if err != nil {
				t.Fatal(err)
			}
			if got := showTxn(resp); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if resp.Header.Revision != tc.rev || resp.Header.MemberId == 0 || resp.Header.RaftTerm == 0 {
				t.Fatalf("header %v, want revision %d", resp.Header, tc.rev)
			}
		})
	}
}

func TestTxnRefused(t *testing.T) {
	n := startNode(t)
	seed(t, n)
	ctx := ctxT(t)
	many := make([]*etcdserverpb.RequestOp, 129)
	for i := range many {
		many[i] = putOp(fmt.Sprintf("k%03d", i), "v")
	}
	nestedMany := &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("x", "1"), txnOp(&etcdserverpb.TxnRequest{Success: many[:127]})}}
	for _, tc := range []struct {
		name string
		txn  *etcdserverpb.TxnRequest
		want error
	}{
		{"too many ops", &etcdserverpb.TxnRequest{Success: many}, rpctypes.ErrGRPCTooManyOps},
		{"too many ops nested", nestedMany, rpctypes.ErrGRPCTooManyOps},
		{"duplicate put", &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("a", "1"), putOp("a", "2")}}, rpctypes.ErrGRPCDuplicateKey},
		{"put and delete", &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("a", "1"), delOp("a")}}, rpctypes.ErrGRPCDuplicateKey},
		{"duplicate put in a nested txn", &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("a", "1"), txnOp(&etcdserverpb.TxnRequest{Failure: []*etcdserverpb.RequestOp{putOp("a", "2")}})}}, rpctypes.ErrGRPCDuplicateKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.kv.Txn(ctx, tc.txn)
			isErr(t, err, tc.want)
		})
	}
	// The two branches of one nested txn may write the same key.
	resp, err := n.kv.Txn(ctx, &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{
		txnOp(&etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("a", "s")}, Failure: []*etcdserverpb.RequestOp{putOp("a", "f")}}),
	}})
	if err != nil || !strings.HasPrefix(showTxn(resp), "SUCCESS txn[SUCCESS put]") {
		t.Fatalf("exclusive branches: %v %v", resp, err)
	}
}
