package etcdapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
		{"/v3/kv/put", `{"key":"Zm9v","value":"YmFy"}`, 200, []string{`"revision":"1"`}},
		{"/v3/kv/range", `{"key":"Zm9v"}`, 200, []string{`"key":"Zm9v"`, `"value":"YmFy"`, `"mod_revision":"1"`, `"count":"1"`}},
		{"/v3/kv/txn", `{"compare":[{"key":"Zm9v","target":"VALUE","value":"YmFy"}],"success":[{"request_put":{"key":"Zm9v","value":"YmF6"}}]}`, 200, []string{`"succeeded":true`, `"revision":"2"`}},
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
