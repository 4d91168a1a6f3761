package browser

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardAuth: with auth on the dashboard asks for a login, keeps
// the token in memory only (a reload asks again; nothing in storage or
// cookies), and hides the edit actions on keys the user may only read.
func TestDashboardAuth(t *testing.T) {
	br := newBrowser(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n1 := c.Members[0].HTTPAddr
	for _, k := range []string{"app/config", "app/mine/note"} {
		if err := call(ctx, n1, "POST", "/v1/kv/put", map[string]any{"key": b64(k), "value": b64("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/auth/user/add", map[string]any{"name": "root", "password": "rootpw"}},
		{"/v1/auth/user/grant", map[string]any{"user": "root", "role": "root"}},
		{"/v1/auth/user/add", map[string]any{"name": "alice", "password": "alicepw"}},
		{"/v1/auth/role/add", map[string]any{"name": "app-reader"}},
		{"/v1/auth/role/grant", map[string]any{"role": "app-reader", "prefix": true, "permission": map[string]any{"type": "READ", "key": b64("app/")}}},
		{"/v1/auth/role/grant", map[string]any{"role": "app-reader", "prefix": true, "permission": map[string]any{"type": "WRITE", "key": b64("app/mine/")}}},
		{"/v1/auth/user/grant", map[string]any{"user": "alice", "role": "app-reader"}},
		{"/v1/auth/enable", map[string]any{}},
	} {
		if err := call(ctx, n1, "POST", s.path, s.body, nil); err != nil {
			t.Fatal(err)
		}
	}
	ui := "http://" + n1 + "/ui/"
	br.run(br.ctx, "login form",
		chromedp.Navigate(ui+"#/keys?p=app%2F&k=app%2Fconfig"),
		chromedp.WaitVisible(css("#login-user")),
		chromedp.SendKeys(css("#login-user"), "alice"),
		chromedp.SendKeys(css("#login-password"), "wrong"),
		chromedp.Click(css(".login button[type=submit]")),
		until(`document.querySelector('.login .msg.error')?.textContent.length > 0`),
		br.screenshot("login"),
		chromedp.SetValue(css("#login-password"), "alicepw"),
		chromedp.Click(css(".login button[type=submit]")),
		until(`document.querySelector('#key-name')?.textContent === 'app/config'`))
	canEdit := get(br, br.ctx, "edit on app/config", chromedp.Evaluate[bool](`!!document.querySelector('#edit-key')`))
	if canEdit {
		t.Errorf("alice may only read app/config, but the page offers to edit it")
	}
	br.run(br.ctx, "writable key", chromedp.Navigate(ui+"#/keys?p=app%2Fmine%2F&k=app%2Fmine%2Fnote"),
		until(`document.querySelector('#key-name')?.textContent === 'app/mine/note' && !!document.querySelector('#edit-key')`))
	stored := get(br, br.ctx, "storage", chromedp.Evaluate[string](`localStorage.length + sessionStorage.length + document.cookie`))
	if stored != "0" {
		t.Errorf("the page stored something: %q", stored)
	}
	br.run(br.ctx, "reload asks again", chromedp.Reload(), chromedp.WaitVisible(css("#login-user")))
	br.checkErrors()
}
