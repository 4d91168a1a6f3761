package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestStoreHTTP: the HTTP/JSON API names a store with ?store= or the
// Dkv-Store header, and the plain-value endpoint cannot reach a named
// store's keys.
func TestStoreHTTP(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := dkvpb.NewStoreClient(conn).Create(ctx, &dkvpb.StoreCreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	do := func(method, path, header, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if header != "" {
			req.Header.Set("Dkv-Store", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// "eA==" is "x"; "aW4tYQ==" "in-a", "aW4tZGVm" "in-def".
	if code, body := do("POST", "/v1/kv/put?store=a", "", `{"key":"eA==","value":"aW4tYQ=="}`); code != 200 {
		t.Fatalf("put in a: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/kv/put", "", `{"key":"eA==","value":"aW4tZGVm"}`); code != 200 {
		t.Fatalf("put in default: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/kv/range", "a", `{"key":"eA=="}`); code != 200 || !strings.Contains(body, `"value":"aW4tYQ=="`) || !strings.Contains(body, `"key":"eA=="`) {
		t.Errorf("range x with Dkv-Store a: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/kv/range?store=a", "", `{"key":"eA=="}`); code != 200 || !strings.Contains(body, `"value":"aW4tYQ=="`) {
		t.Errorf("range x with ?store=a: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/kv/range?store=nope", "", `{"key":"eA=="}`); code != 404 || !strings.Contains(body, "dkv store create nope") {
		t.Errorf("range in a missing store: %d %s", code, body)
	}
	if code, body := do("GET", "/v1/keys/x", "", ""); code != 200 || body != "in-def" {
		t.Errorf("GET /v1/keys/x: %d %q", code, body)
	}
	if code, body := do("GET", "/v1/keys/"+url.PathEscape("\xff\xff\xffdkv/stores/a/x"), "", ""); code != 400 || !strings.Contains(body, "reserved") {
		t.Errorf("GET /v1/keys/ of store a's physical key: %d %q, want 400", code, body)
	}
	// The plain-value endpoint takes the store the same two ways.
	if code, body := do("GET", "/v1/keys/x?store=a", "", ""); code != 200 || body != "in-a" {
		t.Errorf("GET /v1/keys/x?store=a: %d %q, want in-a", code, body)
	}
	if code, body := do("PUT", "/v1/keys/y", "a", "y-in-a"); code != 200 {
		t.Errorf("PUT /v1/keys/y with Dkv-Store a: %d %q", code, body)
	}
	if code, body := do("GET", "/v1/keys/y", "", ""); code != 404 || !strings.Contains(body, `key "y" not found`) {
		t.Errorf("GET /v1/keys/y in the default store: %d %q, want 404 (y is a's)", code, body)
	}
	if code, body := do("DELETE", "/v1/keys/y?store=a", "", ""); code != 200 || strings.TrimSpace(body) != "1" {
		t.Errorf("DELETE /v1/keys/y?store=a: %d %q, want 1 deleted", code, body)
	}
	if code, body := do("GET", "/v1/keys/x?store=nope", "", ""); code != 404 || !strings.Contains(body, "dkv store create nope") {
		t.Errorf("GET /v1/keys/x in a missing store: %d %q", code, body)
	}
}
