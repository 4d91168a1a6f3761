package etcdapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGatewayMore: the etcd HTTP/JSON paths of the Cluster, Maintenance,
// Auth, lock and election services, as curl users of etcd call them.
func TestGatewayMore(t *testing.T) {
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
		return resp.StatusCode, strings.ReplaceAll(string(b), " ", "")
	}
	code, body := post("/v3/lease/grant", `{"TTL":"30"}`)
	i := strings.Index(body, `"ID":"`)
	if code != 200 || i < 0 {
		t.Fatalf("lease grant: %d %s", code, body)
	}
	id := body[i+6 : i+6+strings.Index(body[i+6:], `"`)]
	for _, tc := range []struct {
		path, body string
		code       int
		has        []string
	}{
		{"/v3/maintenance/status", `{}`, 200, []string{`"version":"3.7.0+dkv.`, `"leader":"`}},
		{"/v3/cluster/member/list", `{}`, 200, []string{`"name":"default"`, `"clientURLs":["http://`}},
		{"/v3/auth/status", `{}`, 200, []string{`"header":`}},
		{"/v3/auth/authenticate", `{"name":"root","password":"x"}`, 400, []string{"etcdserver: authentication is not enabled"}},
		// "bA==" is "l": the lock's key is l/<lease hex>.
		{"/v3/lock/lock", `{"name":"bA==","lease":"` + id + `"}`, 200, []string{`"key":"`}},
		{"/v3/election/campaign", `{"name":"ZQ==","lease":"` + id + `","value":"dg=="}`, 200, []string{`"leader":{"name":"ZQ=="`}},
		{"/v3/election/leader", `{"name":"ZQ=="}`, 200, []string{`"value":"dg=="`}},
		{"/v3/election/leader", `{"name":"bm9uZQ=="}`, 404, []string{"election: no leader"}},
	} {
		code, body := post(tc.path, tc.body)
		ok := code == tc.code
		for _, h := range tc.has {
			ok = ok && strings.Contains(body, strings.ReplaceAll(h, " ", ""))
		}
		if !ok {
			t.Errorf("POST %s %s: %d %s, want %d with %q", tc.path, tc.body, code, body, tc.code, tc.has)
		}
	}
}
