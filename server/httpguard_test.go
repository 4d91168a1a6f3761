package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// guardReq is one HTTP request for the guard tests: method, URL, body
// and headers (a "Host" entry sets the Host header).
func guardReq(t *testing.T, c *http.Client, method, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// keyAbsent fails the test if key exists (read in-process, past HTTP).
func keyAbsent(t *testing.T, conn *grpc.ClientConn, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := dkvpb.NewKVClient(conn).Range(ctx, &dkvpb.RangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("key %q was written (value %q): the request should have been refused", key, resp.Kvs[0].Value)
	}
}

// TestHTTPWriteNeedsNonSimpleContentType: a request a browser may send
// to another origin without asking first (a form or a no-cors fetch:
// text/plain, a form encoding, or no Content-Type) changes nothing; the
// answer is 415 naming the rule. JSON endpoints take application/json,
// the plain-value endpoint a non-simple type or X-DKV-Request.
func TestHTTPWriteNeedsNonSimpleContentType(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{Name: "n1"})
	put := `{"key":"` + b64s("simple/json") + `","value":"` + b64s("v") + `"}`
	for _, c := range []struct {
		method, path, ctype, body, key string
	}{
		{"POST", "/v1/keys/simple/form", "text/plain", "v", "simple/form"},
		{"PUT", "/v1/keys/simple/form", "application/x-www-form-urlencoded", "v", "simple/form"},
		{"POST", "/v1/keys/simple/form", "multipart/form-data; boundary=x", "v", "simple/form"},
		{"PUT", "/v1/keys/simple/form", "", "v", "simple/form"},
		{"POST", "/v1/kv/put", "text/plain", put, "simple/json"},
		{"POST", "/v1/kv/put", "text/plain;charset=UTF-8", put, "simple/json"},
		{"POST", "/v1/kv/put", "", put, "simple/json"},
		{"POST", "/v1/kv/put", "application/x-www-form-urlencoded", put, "simple/json"},
		{"POST", "/v1/kv/put", "application/octet-stream", put, "simple/json"},
		{"POST", "/v3/kv/put", "text/plain", put, "simple/json"},
		// etcd's gateway takes no Content-Type from programs (below), not
		// from a browser: a no-cors fetch of a Blob sends none.
		{"POST", "/v3/kv/put", "", put, "simple/json"},
		{"POST", "/v3beta/kv/put", "", put, "simple/json"},
	} {
		hdr := map[string]string{}
		if c.ctype != "" {
			hdr["Content-Type"] = c.ctype
		}
		if c.ctype == "" && strings.HasPrefix(c.path, "/v3") {
			hdr["Sec-Fetch-Mode"] = "no-cors"
		}
		code, _, body := guardReq(t, nil, c.method, base+c.path, c.body, hdr)
		if code != http.StatusUnsupportedMediaType || !strings.Contains(body, "Content-Type") {
			t.Errorf("%s %s with Content-Type %q: %d %q; want 415 naming the Content-Type rule", c.method, c.path, c.ctype, code, body)
		}
		keyAbsent(t, conn, c.key)
	}
	// What clients send is served.
	for _, c := range []struct {
		method, path, body string
		hdr                map[string]string
	}{
		{"PUT", "/v1/keys/ok/octet", "v", map[string]string{"Content-Type": "application/octet-stream"}},
		{"POST", "/v1/keys/ok/header", "v", map[string]string{"X-DKV-Request": "1"}},
		{"POST", "/v1/kv/put", `{"key":"` + b64s("ok/json") + `","value":"dg=="}`, map[string]string{"Content-Type": "application/json"}},
		{"POST", "/v1/kv/put", `{"key":"` + b64s("ok/json2") + `","value":"dg=="}`, map[string]string{"Content-Type": "application/json; charset=utf-8"}},
		{"DELETE", "/v1/keys/ok/octet", "", nil},
		// etcd3gw's transactions: no Content-Type, no browser's marks.
		{"POST", "/v3/kv/put", `{"key":"` + b64s("ok/etcd") + `","value":"dg=="}`, nil},
	} {
		if code, _, body := guardReq(t, nil, c.method, base+c.path, c.body, c.hdr); code != 200 {
			t.Errorf("%s %s %v: %d %s, want 200", c.method, c.path, c.hdr, code, body)
		}
	}
}

// TestHTTPRefusesCrossOrigin: a request from another origin (its Origin
// header, or Sec-Fetch-Site: cross-site) is refused 403 whatever its
// Content-Type, except on the health probes; the member's own origin is
// served.
func TestHTTPRefusesCrossOrigin(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{Name: "n1"})
	jsonPut := func(k string) string { return `{"key":"` + b64s(k) + `","value":"dg=="}` }
	for _, c := range []struct {
		method, path, body string
		hdr                map[string]string
		key                string
	}{
		{"POST", "/v1/kv/put", jsonPut("xo/a"), map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json"}, "xo/a"},
		{"PUT", "/v1/keys/xo/b", "v", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/octet-stream"}, "xo/b"},
		{"POST", "/v1/kv/put", jsonPut("xo/c"), map[string]string{"Origin": "null", "Content-Type": "application/json"}, "xo/c"},
		{"POST", "/v1/kv/put", jsonPut("xo/d"), map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, "xo/d"},
		// Another port of the same host is another origin.
		{"POST", "/v1/kv/put", jsonPut("xo/e"), map[string]string{"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"}, "xo/e"},
		// A read too: the page must not get the answer either.
		{"GET", "/v1/keys/xo/a", "", map[string]string{"Origin": "http://evil.example"}, ""},
		{"GET", "/metrics", "", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, ""},
	} {
		code, h, body := guardReq(t, nil, c.method, base+c.path, c.body, c.hdr)
		if code != http.StatusForbidden || !strings.Contains(body, "--cors-allowed-origins") {
			t.Errorf("%s %s %v: %d %q; want 403 naming --cors-allowed-origins", c.method, c.path, c.hdr, code, body)
		}
		if a := h.Get("Access-Control-Allow-Origin"); a != "" {
			t.Errorf("%s %s %v: Access-Control-Allow-Origin %q on a refusal", c.method, c.path, c.hdr, a)
		}
		if c.key != "" {
			keyAbsent(t, conn, c.key)
		}
	}
	// The member's own origin, and a same-origin fetch, are served.
	for _, hdr := range []map[string]string{
		{"Origin": base, "Content-Type": "application/json"},
		{"Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
		{"Sec-Fetch-Site": "none", "Content-Type": "application/json"},
	} {
		if code, _, body := guardReq(t, nil, "POST", base+"/v1/kv/put", jsonPut("same/origin"), hdr); code != 200 {
			t.Errorf("POST /v1/kv/put %v: %d %s, want 200", hdr, code, body)
		}
	}
	// Health probes answer whoever asks.
	for _, p := range []string{"/livez", "/readyz"} {
		if code, _, body := guardReq(t, nil, "GET", base+p, "", map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}); code != 200 {
			t.Errorf("GET %s from another origin: %d %s, want 200", p, code, body)
		}
	}
}

// TestHTTPRefusesForeignHost: a Host header that names none of the
// member's addresses (a DNS name rebound to it) is answered 421 on every
// path but the health probes; its own addresses and localhost are
// served.
func TestHTTPRefusesForeignHost(t *testing.T) {
	s, base, _ := startHTTPTestServer(t, Config{Name: "n1"})
	if code, _, body := guardReq(t, nil, "PUT", base+"/v1/keys/host/k", "v", map[string]string{"Content-Type": "application/octet-stream"}); code != 200 {
		t.Fatalf("PUT host/k: %d %s", code, body)
	}
	_, port, _ := strings.Cut(s.HTTPAddr(), ":")
	for _, host := range []string{"attacker.example", "attacker.example:" + port, "localhost.attacker.example:" + port, "10.1.2.3:" + port} {
		for _, p := range []string{"/v1/keys/host/k", "/metrics", "/ui/", "/v1/cluster/statuses"} {
			code, _, body := guardReq(t, nil, "GET", base+p, "", map[string]string{"Host": host})
			if code != http.StatusMisdirectedRequest || !strings.Contains(body, "--http-allowed-hosts") {
				t.Errorf("GET %s with Host %q: %d %q; want 421 naming --http-allowed-hosts", p, host, code, body)
			}
		}
		code, _, body := guardReq(t, nil, "POST", base+"/v1/kv/range", `{"key":"`+b64s("host/k")+`"}`, map[string]string{"Host": host, "Content-Type": "application/json"})
		if code != http.StatusMisdirectedRequest {
			t.Errorf("POST /v1/kv/range with Host %q: %d %q; want 421", host, code, body)
		}
		for _, p := range []string{"/livez", "/readyz"} {
			if code, _, body := guardReq(t, nil, "GET", base+p, "", map[string]string{"Host": host}); code != 200 {
				t.Errorf("GET %s with Host %q: %d %s, want 200 (probes are exempt)", p, host, code, body)
			}
		}
	}
	for _, host := range []string{s.HTTPAddr(), "localhost:" + port, "LOCALHOST:" + port, "127.0.0.1"} {
		if code, _, body := guardReq(t, nil, "GET", base+"/v1/keys/host/k", "", map[string]string{"Host": host}); code != 200 || body != "v" {
			t.Errorf("GET /v1/keys/host/k with Host %q: %d %q, want 200 v", host, code, body)
		}
	}
}

// TestHTTPClientCertCrossOrigin is the finding's attack: with
// --client-cert-auth and auth on, the browser attaches root's
// certificate to a cross-origin text/plain POST; it must not create a
// user, nor make it root.
func TestHTTPClientCertCrossOrigin(t *testing.T) {
	p := newTestPKI(t)
	s := startTLSServer(t, TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, TrustedCAFile: p.caFile, ClientCertAuth: true})
	base := "https://" + s.HTTPAddr()
	certClient := func(cn string) *http.Client {
		var certs []tls.Certificate
		if cn != "" {
			certs = []tls.Certificate{p.client(t, cn)}
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), Certificates: certs}}}
	}
	root := certClient("root")
	jsonHdr := map[string]string{"Content-Type": "application/json"}
	for _, c := range []struct{ path, body string }{
		{"/v1/auth/user/add", `{"name":"root","password":"rootpw"}`},
		{"/v1/auth/user/grant", `{"user":"root","role":"root"}`},
		{"/v1/auth/user/add", `{"name":"alice","password":"alicepw"}`},
		{"/v1/auth/enable", `{}`},
	} {
		if code, _, body := guardReq(t, root, "POST", base+c.path, c.body, jsonHdr); code != 200 {
			t.Fatalf("POST %s as root: %d %s", c.path, code, body)
		}
	}
	// The attack: what a page on https://evil.example makes the browser
	// send, with root's certificate attached and no token.
	evil := map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
	for _, c := range []struct{ path, body string }{
		{"/v1/auth/user/add", `{"name":"mallory","password":"pw"}`},
		{"/v1/auth/user/grant", `{"user":"mallory","role":"root"}`},
	} {
		if code, _, body := guardReq(t, root, "POST", base+c.path, c.body, evil); code != http.StatusForbidden {
			t.Errorf("cross-origin POST %s with root's certificate: %d %s, want 403", c.path, code, body)
		}
	}
	// Even without the Origin (an old browser): text/plain is refused.
	if code, _, body := guardReq(t, root, "POST", base+"/v1/auth/user/add", `{"name":"mallory","password":"pw"}`, map[string]string{"Content-Type": "text/plain"}); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain POST user/add with root's certificate: %d %s, want 415", code, body)
	}
	code, _, body := guardReq(t, root, "GET", base+"/v1/auth/user/list", "", nil)
	if code != 200 || strings.Contains(body, "mallory") || !strings.Contains(body, "alice") {
		t.Fatalf("user list as root: %d %s; want alice and no mallory", code, body)
	}
	// /metrics with auth on: any user's certificate, not none.
	if code, _, body := guardReq(t, certClient("alice"), "GET", base+"/metrics", "", nil); code != 200 || !strings.Contains(body, "dkv_") {
		t.Errorf("/metrics with alice's certificate: %d, want 200 with metrics", code)
	}
	if code, _, body := guardReq(t, certClient(""), "GET", base+"/metrics", "", nil); code != http.StatusUnauthorized || strings.Contains(body, "dkv_") {
		t.Errorf("/metrics without a certificate or token, auth on: %d %.200s; want 401", code, body)
	}
	if code, _, _ := guardReq(t, certClient(""), "GET", base+"/livez", "", nil); code != 200 {
		t.Errorf("/livez without a certificate: %d, want 200", code)
	}
}

// TestMetricsNeedCredentialsWithAuth: with auth on, /metrics (which
// names queues from the key space) needs a token of any user; without
// auth it stays open.
func TestMetricsNeedCredentialsWithAuth(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{Name: "n1"})
	if code, _, body := guardReq(t, nil, "GET", base+"/metrics", "", nil); code != 200 || !strings.Contains(body, "dkv_") {
		t.Fatalf("/metrics with auth off: %d", code)
	}
	alice, _ := enableAuthHTTP(t, base)
	code, _, body := guardReq(t, nil, "GET", base+"/metrics", "", nil)
	if code != http.StatusUnauthorized || strings.Contains(body, "dkv_") {
		t.Errorf("/metrics without a token, auth on: %d %.300s; want 401", code, body)
	}
	if code, _, body := guardReq(t, nil, "GET", base+"/metrics", "", map[string]string{"Authorization": "Bearer not-a-token"}); code != http.StatusUnauthorized {
		t.Errorf("/metrics with a bad token: %d %.300s; want 401", code, body)
	}
	if code, _, body := guardReq(t, nil, "GET", base+"/metrics", "", map[string]string{"Authorization": "Bearer " + alice}); code != 200 || !strings.Contains(body, "dkv_") {
		t.Errorf("/metrics with alice's token: %d %.300s; want 200", code, body)
	}
}

func b64s(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestHTTPCORSPreflight: a preflight from an origin in
// --cors-allowed-origins is answered with the Access-Control-Allow-*
// headers, and its page's requests are served and readable; one from
// another origin is refused 403, without them.
func TestHTTPCORSPreflight(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{Name: "n1", CORSAllowedOrigins: []string{"https://App.example:443/"}})
	pre := func(origin string) (int, http.Header) {
		code, h, _ := guardReq(t, nil, "OPTIONS", base+"/v1/kv/put", "", map[string]string{
			"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"})
		return code, h
	}
	code, h := pre("https://app.example")
	if code != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "content-type") ||
		!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("preflight from the allowed origin: %d %v; want 204 allowing POST with Authorization and Content-Type", code, h)
	}
	for _, o := range []string{"https://evil.example", "http://app.example", "https://app.example:8443", "null"} {
		if code, h := pre(o); code != http.StatusForbidden || h.Get("Access-Control-Allow-Origin") != "" || h.Get("Access-Control-Allow-Methods") != "" {
			t.Errorf("preflight from %s: %d %v; want 403 without Access-Control headers", o, code, h)
		}
	}
	body := `{"key":"` + b64s("cors/ok") + `","value":"dg=="}`
	code, h, msg := guardReq(t, nil, "POST", base+"/v1/kv/put", body, map[string]string{"Origin": "https://app.example", "Content-Type": "application/json"})
	if code != 200 || h.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("POST from the allowed origin: %d %v %s; want 200 with Access-Control-Allow-Origin", code, h, msg)
	}
	// The allowed origin's page still cannot write with a simple request.
	body = `{"key":"` + b64s("cors/plain") + `","value":"dg=="}`
	if code, _, msg := guardReq(t, nil, "POST", base+"/v1/kv/put", body, map[string]string{"Origin": "https://app.example", "Content-Type": "text/plain"}); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain POST from the allowed origin: %d %s; want 415", code, msg)
	}
	keyAbsent(t, conn, "cors/plain")
}

// TestHTTPAllowedHosts: a name in --http-allowed-hosts is served, "*"
// serves any.
func TestHTTPAllowedHosts(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{Name: "n1", HTTPAllowedHosts: []string{"dkv.example.com:7863"}})
	for host, want := range map[string]int{"dkv.example.com": 200, "DKV.example.com.:1": 200, "other.example.com": 421} {
		if code, _, body := guardReq(t, nil, "GET", base+"/v1/cluster/status", "", map[string]string{"Host": host}); code != want {
			t.Errorf("Host %q with --http-allowed-hosts dkv.example.com:7863: %d %s, want %d", host, code, body, want)
		}
	}
	_, base, _ = startHTTPTestServer(t, Config{Name: "n1", HTTPAllowedHosts: []string{"*"}})
	if code, _, body := guardReq(t, nil, "GET", base+"/v1/cluster/status", "", map[string]string{"Host": "anything.example"}); code != 200 {
		t.Errorf("Host anything.example with --http-allowed-hosts '*': %d %s, want 200", code, body)
	}
}

// TestHTTPGuardConfigValidation: a malformed origin or host is refused
// at New, naming the flag and what is wrong.
func TestHTTPGuardConfigValidation(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{CORSAllowedOrigins: []string{"app.example"}}, `--cors-allowed-origins: "app.example" is not an origin: it needs the scheme http:// or https://`},
		{Config{CORSAllowedOrigins: []string{"https://app.example/path"}}, "--cors-allowed-origins: \"https://app.example/path\" is not an origin: write scheme://host[:port]"},
		{Config{CORSAllowedOrigins: []string{"*"}}, "--cors-allowed-origins"},
		{Config{CORSAllowedOrigins: []string{"ftp://app.example"}}, "needs the scheme http:// or https://"},
		{Config{HTTPAllowedHosts: []string{"https://dkv.example.com"}}, `--http-allowed-hosts: "https://dkv.example.com" is not a host name`},
		{Config{HTTPAllowedHosts: []string{""}}, "--http-allowed-hosts"},
	} {
		c.cfg.DataDir = t.TempDir()
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v; want an error containing %q", c.cfg.CORSAllowedOrigins, err, c.want)
		}
	}
	for _, ok := range []Config{
		{CORSAllowedOrigins: []string{"https://app.example", "http://127.0.0.1:8080", "http://[::1]:3000/"}, HTTPAllowedHosts: []string{"dkv.example.com", "10.0.0.5:7863", "[::1]", "*"}},
	} {
		ok.DataDir = t.TempDir()
		ok.EnsureDefaults()
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%v %v): %v", ok.CORSAllowedOrigins, ok.HTTPAllowedHosts, err)
		}
	}
}

// TestMetricsOpenFlag: --metrics-open serves /metrics without
// credentials with auth on.
func TestMetricsOpenFlag(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{Name: "n1", MetricsOpen: true})
	enableAuthHTTP(t, base)
	if code, _, body := guardReq(t, nil, "GET", base+"/metrics", "", nil); code != 200 || !strings.Contains(body, "dkv_") {
		t.Errorf("/metrics without a token, auth on, --metrics-open: %d, want 200", code)
	}
}
