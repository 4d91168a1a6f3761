package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// nestedTxn is a txn with n txns nested in it, one in the other's
// success branch; the innermost puts key.
func nestedTxn(n int, key string) *dkvpb.TxnRequest {
	t := &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte(key), Value: []byte("v")}}}}}
	for range n {
		t = &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestTxn{RequestTxn: t}}}}
	}
	return t
}

func nestedEtcdTxn(n int) *etcdserverpb.TxnRequest {
	t := &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: []byte("e"), Value: []byte("v")}}}}}
	for range n {
		t = &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestTxn{RequestTxn: t}}}}
	}
	return t
}

// nestedTxnJSON is nestedTxn(n) as a JSON gateway's body, with RequestOp's
// fields named as the gateway writes them: "requestTxn" (DKV's /v1) or
// "request_txn" (etcd's /v3).
func nestedTxnJSON(n int, txnField, putField string) string {
	return strings.Repeat(`{"success":[{"`+txnField+`":`, n) +
		`{"success":[{"` + putField + `":{"key":"a2V5","value":"dg=="}}]}` +
		strings.Repeat(`}]}`, n)
}

// TestTxnNestingLimit: a txn nested deeper than 16 levels is refused as
// InvalidInput naming the limit, over gRPC (DKV's and etcd's Txn) and
// the JSON gateways (/v1 and /v3), however deep it goes: 5,000 levels
// answered Internal ("exceeded maximum recursion depth") from the
// decoder. 16 nested levels are served.
func TestTxnNestingLimit(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{Name: "n1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, etcd := dkvpb.NewKVClient(conn), etcdserverpb.NewKVClient(conn)
	refused := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "16") {
			t.Errorf("%s: %v; want InvalidArgument naming the limit 16", what, err)
		}
	}
	for _, n := range []int{5000, 17} {
		_, err := kv.Txn(ctx, nestedTxn(n, "deep"))
		refused(fmt.Sprintf("gRPC txn nested %d", n), err)
		if n == 5000 && dkverr.CodeOf(err) != dkverr.InvalidInput {
			t.Errorf("gRPC txn nested 5000: code %v, want InvalidInput", dkverr.CodeOf(err))
		}
		_, err = etcd.Txn(ctx, nestedEtcdTxn(n))
		refused(fmt.Sprintf("etcd gRPC txn nested %d", n), err)
		if code, body := post(t, base+"/v1/kv/txn", strings.NewReader(nestedTxnJSON(n, "requestTxn", "requestPut"))); code != 400 || !strings.Contains(body, "16") {
			t.Errorf("POST /v1/kv/txn nested %d: %d %.300s; want 400 naming the limit 16", n, code, body)
		}
		if code, body := post(t, base+"/v3/kv/txn", strings.NewReader(nestedTxnJSON(n, "request_txn", "request_put"))); code != 400 || !strings.Contains(body, "16") {
			t.Errorf("POST /v3/kv/txn nested %d: %d %.300s; want 400 naming the limit 16", n, code, body)
		}
	}
	if r, err := kv.Txn(ctx, nestedTxn(16, "k16")); err != nil || !r.GetSucceeded() {
		t.Errorf("gRPC txn nested 16: %v %v; want it served", r, err)
	}
	if _, err := etcd.Txn(ctx, nestedEtcdTxn(16)); err != nil {
		t.Errorf("etcd gRPC txn nested 16: %v; want it served", err)
	}
	if code, body := post(t, base+"/v1/kv/txn", strings.NewReader(nestedTxnJSON(16, "requestTxn", "requestPut"))); code != 200 {
		t.Errorf("POST /v1/kv/txn nested 16: %d %.300s; want 200", code, body)
	}
	if code, body := post(t, base+"/v3/kv/txn", strings.NewReader(nestedTxnJSON(16, "request_txn", "request_put"))); code != 200 {
		t.Errorf("POST /v3/kv/txn nested 16: %d %.300s; want 200", code, body)
	}
	if r, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k16")}); err != nil || len(r.GetKvs()) != 1 {
		t.Errorf("the 16-deep txn's put: %v %v", r, err)
	}
}
