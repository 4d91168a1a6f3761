package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// authedCall sends a JSON POST (body "" for GET) with a bearer token.
func authedCall(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// enableAuthHTTP makes root and alice (read on app/ and write on
// app/mine/) and enables auth, all through the HTTP API; it returns
// alice's and root's tokens.
func enableAuthHTTP(t *testing.T, base string) (alice, root string) {
	t.Helper()
	for _, c := range []struct{ path, body string }{
		{"/v1/auth/user/add", `{"name":"root","password":"rootpw"}`},
		{"/v1/auth/user/grant", `{"user":"root","role":"root"}`},
		{"/v1/auth/user/add", `{"name":"alice","password":"alicepw"}`},
		{"/v1/auth/role/add", `{"name":"app-reader"}`},
		{"/v1/auth/role/grant", `{"role":"app-reader","permission":{"type":"READ","key":"YXBwLw=="},"prefix":true}`},
		{"/v1/auth/role/grant", `{"role":"app-reader","permission":{"type":"WRITE","key":"YXBwL21pbmUv"},"prefix":true}`},
		{"/v1/auth/user/grant", `{"user":"alice","role":"app-reader"}`},
		{"/v1/auth/enable", `{}`},
	} {
		if code, msg := authedCall(t, "POST", base+c.path, "", c.body); code != 200 {
			t.Fatalf("POST %s %s: %d %s", c.path, c.body, code, msg)
		}
	}
	login := func(name, pw string) string {
		code, msg := authedCall(t, "POST", base+"/v1/auth/authenticate", "", `{"name":"`+name+`","password":"`+pw+`"}`)
		var r struct{ Token string }
		if code != 200 || json.Unmarshal([]byte(msg), &r) != nil || r.Token == "" {
			t.Fatalf("authenticate %s: %d %s", name, code, msg)
		}
		return r.Token
	}
	return login("alice", "alicepw"), login("root", "rootpw")
}

// TestHTTPWhoami: a user reads its own roles and permissions (UserGet
// and RoleGet need root); without a token the answer is 401; with auth
// off it says so.
func TestHTTPWhoami(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{Name: "n1"})
	var off whoamiResponse
	if code := getJSON(t, base+"/v1/auth/whoami", &off); code != 200 || off.Enabled {
		t.Fatalf("auth off: %d %+v", code, off)
	}
	alice, root := enableAuthHTTP(t, base)
	if code, msg := authedCall(t, "GET", base+"/v1/auth/whoami", "", ""); code != 401 {
		t.Errorf("no token: %d %s, want 401", code, msg)
	}
	if code, _ := authedCall(t, "POST", base+"/v1/auth/user/get", alice, `{"name":"alice"}`); code == 200 {
		t.Errorf("alice may UserGet: the endpoint under test would not be needed")
	}
	code, msg := authedCall(t, "GET", base+"/v1/auth/whoami", alice, "")
	var me whoamiResponse
	if code != 200 || json.Unmarshal([]byte(msg), &me) != nil {
		t.Fatalf("whoami alice: %d %s", code, msg)
	}
	if !me.Enabled || me.User != "alice" || me.Root || len(me.Roles) != 1 || len(me.Permissions) != 2 ||
		me.Permissions[0].Type != "READ" || me.Permissions[0].Key != "YXBwLw==" || me.Permissions[0].RangeEnd != "YXBwMA==" {
		t.Errorf("whoami alice = %+v", me)
	}
	code, msg = authedCall(t, "GET", base+"/v1/auth/whoami", root, "")
	if code != 200 || !strings.Contains(msg, `"root":true`) {
		t.Errorf("whoami root: %d %s", code, msg)
	}
	// GET /v1/locks lists only what the caller may describe.
	if code, msg := authedCall(t, "POST", base+"/v1/lock/acquire", root, `{"key":"YXBwL2xvY2s=","owner":"a","ttl_ms":60000}`); code != 200 {
		t.Fatalf("acquire app/lock: %d %s", code, msg)
	}
	if code, msg := authedCall(t, "POST", base+"/v1/lock/acquire", root, `{"key":"c2VjcmV0","owner":"b","ttl_ms":60000}`); code != 200 {
		t.Fatalf("acquire secret: %d %s", code, msg)
	}
	code, msg = authedCall(t, "GET", base+"/v1/locks", alice, "")
	if code != 200 || !strings.Contains(msg, `"app/lock"`) || strings.Contains(msg, "secret") {
		t.Errorf("alice's /v1/locks: %d %s, want app/lock only", code, msg)
	}
	if code, _ := authedCall(t, "GET", base+"/v1/locks", "", ""); code != 401 {
		t.Errorf("/v1/locks without a token: %d, want 401", code)
	}
}
