package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestClientPortServesEtcdHTTP: the client address answers what etcd
// answers over HTTP on its client URL (a client configured with only
// that URL, as Patroni is, reads /version there first): /version and
// /health in etcd's JSON, etcd's gateway under /v3/ and 3.4's /v3beta/,
// /metrics with the process collectors; other paths are 404 naming the
// HTTP port; a web page's request is refused as on the HTTP port; and
// gRPC keeps working on the same address, also after a connection that
// spoke neither protocol was closed.
func TestClientPortServesEtcdHTTP(t *testing.T) {
	s, err := New(Config{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", HTTPAddr: "", TickInterval: 10 * time.Millisecond, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	startInProcess(t, s)
	base := "http://" + s.ClientAddr()
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	postJSON := func(path, body string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	code, body := get("/version")
	var v map[string]string
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil || v["etcdserver"] != "3.7.0" || v["etcdcluster"] != "3.7.0" || v["dkv"] != Version {
		t.Fatalf("GET /version = %d %s, want etcd's JSON with etcdserver and etcdcluster 3.7.0 and dkv %s", code, body, Version)
	}
	code, body = get("/health")
	if code != 200 || strings.TrimSpace(body) != `{"health":"true","reason":""}` {
		t.Fatalf("GET /health = %d %s, want 200 {\"health\":\"true\",\"reason\":\"\"}", code, body)
	}
	// "Zm9v" is "foo", "YmFy" "bar": etcd's gateway speaks base64 bytes.
	if code, body := postJSON("/v3/kv/put", `{"key":"Zm9v","value":"YmFy"}`); code != 200 {
		t.Fatalf("POST /v3/kv/put = %d %s", code, body)
	}
	for _, p := range []string{"/v3/kv/range", "/v3beta/kv/range"} {
		code, body := postJSON(p, `{"key":"Zm9v"}`)
		if code != 200 || !strings.Contains(body, `"value":"YmFy"`) {
			t.Fatalf("POST %s = %d %s, want the value put", p, code, body)
		}
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "\nprocess_resident_memory_bytes ") {
		t.Fatalf("GET /metrics = %d, want process_resident_memory_bytes (etcdctl check datascale reads it); got %.300s", code, body)
	}
	if code, body := get("/v1/keys/foo"); code != 404 || !strings.Contains(body, "--http-addr") {
		t.Fatalf("GET /v1/keys/foo on the client port = %d %s, want 404 naming the HTTP port", code, body)
	}
	if code, body := postJSON("/v3/kv/put", `{"key":"Zm9v","value":"ZXZpbA=="}`, "Origin", "http://evil.example"); code != 403 {
		t.Fatalf("a cross-site POST /v3/kv/put = %d %s, want 403", code, body)
	}

	// A rebound host name (DNS rebinding) is refused as on the HTTP port.
	req, _ := http.NewRequest("POST", base+"/v3/kv/range", strings.NewReader(`{"key":"Zm9v"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Host = "evil.example:2379"
	if resp, err := hc.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || !strings.Contains(string(b), "is not an address of this member") {
			t.Fatalf("POST /v3/kv/range with Host evil.example = %d %s, want refused", resp.StatusCode, b)
		}
	}

	// A connection that speaks neither HTTP/1 nor HTTP/2 is closed.
	c, err := net.Dial("tcp", s.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("HELLO\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := bufio.NewReader(c).ReadByte(); err == nil {
		t.Fatal("a connection speaking neither protocol got an answer")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection speaking neither protocol was left open")
	}
	c.Close()

	conn, err := grpc.NewClient(s.ClientAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := etcdserverpb.NewKVClient(conn).Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("foo")})
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "bar" {
		t.Fatalf("etcd gRPC Range on the same address = %v, %v; want bar", r, err)
	}
}
