package browser

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// attackerPage is a page on another origin that tries to write to the
// member at TARGET through the visitor's browser: text/plain forms posted
// into a frame. A text/plain form sends name=value, so the second one's
// body is the JSON {"key":"KEY","value":"dg=="}.
const attackerPage = `<!doctype html>
<html><body>
<iframe name="sink"></iframe>
<form id="plain" method="POST" enctype="text/plain" target="sink" action="TARGET/v1/keys/xsite/form"><input name="v" value="1"></form>
<form id="json" method="POST" enctype="text/plain" target="sink" action="TARGET/v1/kv/put"><input name='{"key":"KEY","value":"dg=' value='"}'></form>
</body></html>`

// TestCrossSiteAndRebinding checks cross-site writes in Chromium, auth
// off: a page on another origin submits a text/plain form to
// /v1/keys/..., another shaped as JSON to /v1/kv/put, and no-cors and
// CORS fetches to both; then a page at a DNS name rebound to the member
// (Chromium's host resolver maps attacker.localtest to the member's IP)
// writes and reads same-origin. Every request reaches the member (the
// frame loads, the fetches resolve), and no key is written nor read.
func TestCrossSiteAndRebinding(t *testing.T) {
	c := startCluster(t)
	n1 := c.Members[0].HTTPAddr
	host, port, _ := net.SplitHostPort(n1)
	br := newBrowser(t,
		chromedp.Flag("host-resolver-rules", "MAP attacker.localtest "+host),
		// Navigations to a name stay on http (no https upgrade to fall
		// back from).
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,HttpsUpgrades,HttpsFirstBalancedModeAutoEnable"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := call(ctx, n1, "POST", "/v1/kv/put", map[string]any{"key": b64("secret/k"), "value": b64("s3cret-value")}, nil); err != nil {
		t.Fatal(err)
	}

	target := "http://" + n1
	page := strings.NewReplacer("TARGET", target, "KEY", b64("xsite/formjson")).Replace(attackerPage)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	}))
	defer evil.Close()

	// The attacker's tab, at another origin. Its refusals are the point,
	// so it does not fail on console errors (no br.watch).
	tab, cancelTab := chromedp.NewContext(br.ctx)
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil { // open the tab, for the life of tab (not of a step's timeout)
		t.Fatal(err)
	}
	eval := func(step, js string) string {
		t.Helper()
		c, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(c, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return v
	}
	navigate := func(url string) {
		t.Helper()
		c, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(c, chromedp.Navigate(url)); err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
	}
	navigate(evil.URL + "/")
	for _, form := range []string{"plain", "json"} {
		// The frame's load event says the member answered.
		got := eval("submit form "+form, fmt.Sprintf(`new Promise(res => {
			const fr = document.querySelector('iframe');
			fr.addEventListener('load', () => res('loaded'));
			document.getElementById(%q).submit();
		})`, form))
		if got != "loaded" {
			t.Fatalf("form %s: %s", form, got)
		}
	}
	putBody := func(key string) string {
		return fmt.Sprintf(`JSON.stringify({key: %q, value: "dg=="})`, b64(key))
	}
	// A no-cors fetch sends a simple request and gets an opaque answer:
	// "opaque" says it was sent and answered.
	for _, f := range []struct{ what, js string }{
		{"no-cors fetch to /v1/kv/put", fmt.Sprintf(`fetch(%q, {method: 'POST', mode: 'no-cors', body: %s}).then(r => r.type, e => 'error: ' + e)`, target+"/v1/kv/put", putBody("xsite/nocors"))},
		{"no-cors fetch to /v1/keys/", fmt.Sprintf(`fetch(%q, {method: 'POST', mode: 'no-cors', body: 'v'}).then(r => r.type, e => 'error: ' + e)`, target+"/v1/keys/xsite/nocors-plain")},
		{"no-cors fetch with credentials", fmt.Sprintf(`fetch(%q, {method: 'POST', mode: 'no-cors', credentials: 'include', headers: {'Content-Type': 'text/plain'}, body: %s}).then(r => r.type, e => 'error: ' + e)`, target+"/v3/kv/put", putBody("xsite/nocors-v3"))},
	} {
		if got := eval(f.what, f.js); got != "opaque" {
			t.Errorf("%s: %s, want an opaque answer (the request sent)", f.what, got)
		}
	}
	// A CORS fetch with JSON needs a preflight, which the member refuses.
	js := fmt.Sprintf(`fetch(%q, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: %s}).then(r => 'status ' + r.status, e => 'refused')`, target+"/v1/kv/put", putBody("xsite/cors"))
	if got := eval("CORS fetch to /v1/kv/put", js); got != "refused" {
		t.Errorf("CORS fetch with JSON from another origin: %s, want refused by the preflight", got)
	}
	// A CORS read of the secret: refused, nothing read.
	js = fmt.Sprintf(`fetch(%q).then(r => r.text(), e => 'refused')`, target+"/v1/keys/secret/k")
	if got := eval("CORS read of secret/k", js); got != "refused" {
		t.Errorf("CORS read of secret/k from another origin: %q, want refused", got)
	}

	// DNS rebinding: the page's own origin is now a name for the member,
	// so its requests are same-origin; only the Host header tells.
	navigate("http://attacker.localtest:" + port + "/ui/")
	origin := eval("rebound origin", `Promise.resolve(location.origin)`)
	if origin != "http://attacker.localtest:"+port {
		t.Fatalf("the rebound page's origin is %q", origin)
	}
	js = fmt.Sprintf(`fetch('/v1/kv/put', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: %s}).then(r => String(r.status), e => 'error: ' + e)`, putBody("xsite/rebound"))
	if got := eval("rebound write", js); got != "421" {
		t.Errorf("write from the rebound name: %s, want 421", got)
	}
	js = `fetch('/v1/keys/secret/k').then(async r => r.status + ' ' + await r.text(), e => 'error: ' + e)`
	if got := eval("rebound read", js); !strings.HasPrefix(got, "421 ") || strings.Contains(got, "s3cret-value") {
		t.Errorf("read of secret/k from the rebound name: %q, want 421 without the value", got)
	}

	// Through the API, as a client sees it: nothing under xsite/.
	var out struct {
		Kvs []struct{ Key string }
	}
	if err := call(ctx, n1, "POST", "/v1/kv/range", map[string]any{"key": b64("xsite/"), "range_end": b64("xsite0")}, &out); err != nil {
		t.Fatal(err)
	}
	for _, kv := range out.Kvs {
		t.Errorf("a page on another origin wrote the key %s", decode(kv.Key))
	}
}

func decode(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return s
	}
	return string(b)
}
