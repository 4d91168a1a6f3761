package etcdapi_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestGateway: etcd's HTTP/JSON paths on the HTTP port, as curl users of
// etcd call them (bytes in base64, int64 as strings).
func TestGateway(t *testing.T) {
	n := startNode(t)
	base := "http://" + n.s.HTTPAddr()
	c := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, body string
		code       int
		has        []string
	}{
		{"/v3/kv/put", `{"key":"Zm9v","value":"YmFy"}`, 200, []string{`"revision":"2"`}},
		{"/v3/kv/range", `{"key":"Zm9v"}`, 200, []string{`"key":"Zm9v"`, `"value":"YmFy"`, `"mod_revision":"2"`, `"count":"1"`}},
		{"/v3/kv/txn", `{"compare":[{"key":"Zm9v","target":"VALUE","value":"YmFy"}],"success":[{"request_put":{"key":"Zm9v","value":"YmF6"}}]}`, 200, []string{`"succeeded":true`, `"revision":"3"`}},
		{"/v3/kv/range", `{"key":"Zm9v","revision":"99"}`, 400, []string{"etcdserver: mvcc: required revision is a future revision"}},
		{"/v3/lease/grant", `{"TTL":"30"}`, 200, []string{`"TTL":"30"`}},
		{"/v3/kv/deleterange", `{"key":"Zm9v","prev_kv":true}`, 200, []string{`"deleted":"1"`, `"value":"YmF6"`}},
	} {
		code, body := post(tc.path, tc.body)
		ok := code == tc.code
		for _, h := range tc.has {
			ok = ok && strings.Contains(strings.ReplaceAll(body, " ", ""), strings.ReplaceAll(h, " ", ""))
		}
		if !ok {
			t.Errorf("POST %s %s: %d %s, want %d with %q", tc.path, tc.body, code, body, tc.code, tc.has)
		}
	}
}

// TestMetricsCodes: etcd calls are counted under their method with the
// DKV code their etcd error stands for, not as Internal.
func TestMetricsCodes(t *testing.T) {
	n := startNode(t)
	seed(t, n)
	ctx := ctxT(t)
	if _, err := n.kv.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: 4}); err != nil {
		t.Fatal(err)
	}
	_, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("a"), Revision: 3})
	isErr(t, err, rpctypes.ErrGRPCCompacted)
	_, err = n.kv.Range(ctx, &etcdserverpb.RangeRequest{})
	isErr(t, err, rpctypes.ErrGRPCEmptyKey)
	_, err = n.l.LeaseRevoke(ctx, &etcdserverpb.LeaseRevokeRequest{ID: 99})
	isErr(t, err, rpctypes.ErrGRPCLeaseNotFound)
	resp, err := http.Get("http://" + n.s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`dkv_requests_total{code="Compacted",method="/etcdserverpb.KV/Range"} 1`,
		`dkv_requests_total{code="InvalidInput",method="/etcdserverpb.KV/Range"} 1`,
		`dkv_requests_total{code="LeaseNotFound",method="/etcdserverpb.Lease/LeaseRevoke"} 1`,
		`dkv_requests_total{code="OK",method="/etcdserverpb.KV/Compact"} 1`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(b), `code="Internal",method="/etcdserverpb.`) {
		t.Errorf("an etcd call counted as Internal")
	}
}

// BenchmarkPut compares one put through etcd's API with one through
// DKV's, over the same in-process connection: the cost of translation.
func BenchmarkPut(b *testing.B) {
	for _, api := range []string{"dkv", "etcd"} {
		b.Run(api, func(b *testing.B) {
			n := startNodeB(b)
			ctx := context.Background()
			val := []byte("value")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var err error
				if api == "etcd" {
					_, err = n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("k"), Value: val})
				} else {
					_, err = n.dkv.Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: val})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
