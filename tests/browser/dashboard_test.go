package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/dkv-io/dkv/internal/testutil"
)

// chromium finds the browser: $DKV_CHROMIUM, else Debian's chromium. It
// skips the test when there is none, or fails it under CI=true (CI must
// run it: .ci/run installs chromium).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DKV_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := "no chromium found (install Debian's chromium: apt-get install -y chromium, or set DKV_CHROMIUM)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true, so the browser test must run")
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium whose tabs fail the test on any
// JavaScript console error, uncaught exception or error log entry.
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	errors []string
	shots  string // where screenshots go (screenshotDir)
}

func newBrowser(t *testing.T, extra ...chromedp.ExecAllocatorOption) *browser {
	opts := append(append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // root in CI containers
		chromedp.WindowSize(1280, 800),
	), extra...)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	b := &browser{t: t, shots: screenshotDir(t)}
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	b.ctx = ctx
	b.watch(ctx)
	return b
}

// watch records the tab's console errors and exceptions.
func (b *browser) watch(ctx context.Context) {
	if err := chromedp.Do(ctx); err != nil { // start the browser and open the tab
		b.t.Fatalf("start chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			// An API answer the page handles (a 409 conflict shown to the
			// user) is logged by the browser's network layer; that is not a
			// JavaScript error. A failed asset or any script error is.
			apiAnswer := m.Source == "network" && strings.Contains(m.URL, "/v1/")
			if (m.Type == chromedp.ConsoleError && !apiAnswer) || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				b.mu.Unlock()
			}
		}
	}()
}

// tab opens another tab in the same browser.
func (b *browser) tab() context.Context {
	ctx, cancel := chromedp.NewContext(b.ctx)
	b.t.Cleanup(cancel)
	b.watch(ctx)
	return ctx
}

func (b *browser) checkErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		b.t.Fatalf("JavaScript errors in the dashboard:\n  %s", strings.Join(b.errors, "\n  "))
	}
}

// run runs steps in the tab ctx with a deadline, failing the test with
// the step that failed.
func (b *browser) run(ctx context.Context, step string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		b.t.Fatalf("%s: %v", step, err)
	}
	b.checkErrors()
}

// get runs one action that returns a value.
func get[T any](b *browser, ctx context.Context, step string, a chromedp.Action[T]) T {
	b.t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, a)
	if err != nil {
		b.t.Fatalf("%s: %v", step, err)
	}
	return v
}

// until waits for a JavaScript expression to be true.
func until(expr string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := poll(ctx, t)
		if err != nil {
			page, _ := chromedp.Evaluate[string](`document.querySelector('main').innerText.slice(0, 600)`)(ctx, t)
			return v, fmt.Errorf("waiting for %s: %w\npage shows: %s", expr, err, page)
		}
		return v, nil
	}
}

// screenshotDir is where the screenshots go: docs/ui/ when
// DKV_UI_SCREENSHOTS=1 (to regenerate the ones in the docs), else a
// temporary directory, so a plain run leaves the work tree clean.
func screenshotDir(t testing.TB) string {
	if os.Getenv("DKV_UI_SCREENSHOTS") == "1" {
		return filepath.Join("..", "..", "docs", "ui")
	}
	return t.TempDir()
}

// screenshot saves the viewport as NAME.png in the test's screenshot
// directory (screenshotDir).
func (b *browser) screenshot(name string) chromedp.Action[chromedp.Void] {
	return b.shoot(name, chromedp.CaptureScreenshot())
}

// fullScreenshot saves the whole page, beyond the viewport.
func (b *browser) fullScreenshot(name string) chromedp.Action[chromedp.Void] {
	return b.shoot(name, chromedp.FullScreenshot(100))
}

func (b *browser) shoot(name string, capture chromedp.Action[[]byte]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		buf, err := capture(ctx, t)
		if err != nil {
			return chromedp.Void{}, err
		}
		dir := b.shots
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return chromedp.Void{}, err
		}
		return chromedp.Void{}, os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644)
	}
}

// fill sets a form field's value as typing would (with an input event).
func fill(sel, value string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		ok, err := chromedp.Evaluate[bool](fmt.Sprintf(`(e => { if (!e) return false; e.value = %q; e.dispatchEvent(new Event('input', {bubbles: true})); return true })(document.querySelector(%q))`, value, sel))(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("no %s on the page", sel)
		}
		return chromedp.Void{}, err
	}
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

func jsString(s string) string { return fmt.Sprintf("%q", s) }

// TestDashboard drives the dashboard as a user would, against a 3-member
// cluster: the cluster page names the leader, a key is browsed to and
// edited (and a stale edit is refused as a conflict), the edit streams
// into a live watch in another tab, a lock's holder and waiter are
// shown, and revoking a lease makes its key vanish.
func TestDashboard(t *testing.T) {
	br := newBrowser(t)
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n1 := c.Members[0].HTTPAddr
	put := func(k, v string) {
		t.Helper()
		if err := call(ctx, n1, "POST", "/v1/kv/put", map[string]any{"key": b64(k), "value": b64(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("app/config", `{"color":"blue","replicas":3}`)
	put("app/feature/beta", "on")
	put("app/feature/dark-mode", "off")
	put("jobs/invoice:101", "pending")
	// A feature flag as client/recipe's SetFlag writes it.
	put("dkv.flags/checkout", `{"key":"checkout","type":"bool","variants":{"off":false,"on":true},"defaultVariant":"off","offVariant":"off","enabled":true,"rules":[{"attribute":"plan","op":"eq","values":["beta"],"variant":"on"}],"rollout":{"variant":"on","percent":25}}`)
	// A canary rollout's decision log, as client/recipe's CanaryController
	// records it: proceed at 5%, a wait, then rollback at 25%.
	put("dkv.canary/checkout/decisions/00000000000000000001", `{"seq":1,"percent":5,"baseline":{"requests":3994,"errors":0},"canary":{"requests":201,"errors":0},"decision":"proceed","next_percent":25,"revision":40,"term":4}`)
	put("dkv.canary/checkout/decisions/00000000000000000002", `{"seq":2,"percent":25,"baseline":{"requests":100,"errors":0},"canary":{"requests":30,"errors":2},"decision":"wait","next_percent":25,"revision":50,"term":80}`)
	put("dkv.canary/checkout/decisions/00000000000000000003", `{"seq":3,"percent":25,"baseline":{"requests":1760,"errors":0},"canary":{"requests":551,"errors":28},"decision":"rollback","next_percent":0,"revision":60,"term":80}`)
	// A rate limiter bucket (1 token a minute, burst 5; 2 taken).
	if err := call(ctx, n1, "POST", "/v1/ratelimit/allow", map[string]any{"key": b64("api/ann"), "limit": 1, "period_ms": 60000, "burst": 5, "n": 2}, nil); err != nil {
		t.Fatal(err)
	}
	// A dead-lettered job, as client/recipe's Queue stores one.
	put("dkv.queue/emails/d/0000018f2b3c4d5e6a7b8c9d", `{"id":"0000018f2b3c4d5e6a7b8c9d","payload":"`+b64("welcome mail to ann")+`","run_at_ms":1764600000000,"enqueued_ms":1764600000000,"attempt":3,"max_attempts":3,"last_error":"smtp: connection timed out","dead_ms":1764600300000}`)
	var lease struct{ ID string }
	if err := call(ctx, n1, "POST", "/v1/lease/grant", map[string]any{"ttl_ms": 300000}, &lease); err != nil {
		t.Fatal(err)
	}
	if err := call(ctx, n1, "POST", "/v1/kv/put", map[string]any{"key": b64("dkv.presence/web/web-2"), "value": b64(`{"zone":"a"}`), "lease": lease.ID}, nil); err != nil {
		t.Fatal(err)
	}
	// A lock with a holder and a waiter (the waiter's request blocks).
	if err := call(ctx, n1, "POST", "/v1/lock/acquire", map[string]any{"key": b64("invoice:101"), "owner": "worker-a", "ttl_ms": 300000}, nil); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go call(wctx, c.Members[1].HTTPAddr, "POST", "/v1/lock/acquire", map[string]any{"key": b64("invoice:101"), "owner": "worker-b", "ttl_ms": 300000, "wait": true}, nil)
	// An election: the lock "scheduler" and its candidates' values.
	if err := call(ctx, n1, "POST", "/v1/lock/acquire", map[string]any{"key": b64("scheduler"), "owner": "node-1", "ttl_ms": 300000}, nil); err != nil {
		t.Fatal(err)
	}
	put("scheduler/candidates/node-1", "10.0.0.1:8080")
	leader, err := c.leader()
	if err != nil {
		t.Fatal(err)
	}
	ui := "http://" + n1 + "/ui/"

	// Cluster page: the leader, every member with its role. Some writes
	// and reads on n1 meanwhile, for its charts.
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := range 400 {
			k := b64(fmt.Sprintf("load/k%03d", i%50))
			if call(ctx, n1, "POST", "/v1/kv/put", map[string]any{"key": k, "value": b64("x")}, nil) != nil ||
				call(ctx, n1, "POST", "/v1/kv/range", map[string]any{"key": k}, nil) != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // pacing the load over a few scrapes, not a synchronisation
		}
	}()
	br.run(br.ctx, "cluster page",
		chromedp.Navigate(ui+"#/cluster"),
		until(`document.querySelectorAll('#members tr[data-member]').length === 3 && document.querySelector('#leader-name').textContent !== 'none'`),
		until(`document.querySelector('#rate-now').textContent.includes('writes/s')`), // two scrapes of /metrics
		until(`document.querySelector('#latency-now').textContent.includes('proposal')`),
		until(`Number(document.querySelector('#rate-chart').dataset.points) >= 4`),
		br.fullScreenshot("cluster"))
	<-loadDone
	shown := get(br, br.ctx, "leader name", chromedp.Text(css("#leader-name")))
	if shown != leader {
		t.Errorf("cluster page names %q the leader; the members agree on %q", shown, leader)
	}
	role := get(br, br.ctx, "leader's role", chromedp.Text(css(fmt.Sprintf(`#members tr[data-member=%q] [data-role]`, leader))))
	if role != "leader" {
		t.Errorf("the leader's row says %q", role)
	}

	// The cluster page served by a follower: every member's row still
	// has its term, applied index, lag and db size.
	var follower *testutil.Member
	for _, m := range c.Members {
		if m.Name != leader {
			follower = m
			break
		}
	}
	br.run(br.ctx, "cluster page on a follower",
		chromedp.Navigate("http://"+follower.HTTPAddr+"/ui/#/cluster"),
		until(`document.querySelectorAll('#members tr[data-member]').length === 3`),
		until(`[...document.querySelectorAll('#members tr[data-member]')].every(r => { const n = r.dataset.member, q = (a) => r.querySelector('[data-' + a + '="' + n + '"]')?.textContent || '';
			return /^[1-9]\d*$/.test(q('term')) && /^[1-9]\d*$/.test(q('applied')) && /^\d+$/.test(q('lag')) && /\d (B|KiB|MiB|GiB)/.test(q('size')) })`),
		br.fullScreenshot("cluster-follower"))
	if got := get(br, br.ctx, "follower's leader name", chromedp.Text(css("#leader-name"))); got != leader {
		t.Errorf("the follower's cluster page names %q the leader, want %q", got, leader)
	}

	// A live watch on app/ in a second tab.
	watchTab := br.tab()
	br.run(watchTab, "start a watch",
		chromedp.Navigate(ui+"#/watch"),
		chromedp.WaitVisible(css("#watch-key")),
		chromedp.SendKeys(css("#watch-key"), "app/"),
		chromedp.Click(css("#watch-start")),
		until(`document.querySelector('#watch-status').dataset.state === 'watching'`))

	// Browse to app/config through the tree and edit it.
	br.run(br.ctx, "browse to app/config",
		chromedp.Navigate(ui+"#/keys"),
		until(`!!document.querySelector('#key-tree a[data-key="app/"]') && document.querySelector('#key-count').textContent.includes('keys under')`),
		chromedp.Click(css(`#key-tree a[data-key="app/"]`)),
		until(`!!document.querySelector('#key-tree a[data-key="app/config"]') && document.querySelector('#key-count').textContent.includes('keys under app/')`),
		chromedp.Click(css(`#key-tree a[data-key="app/config"]`)),
		until(`(document.querySelector('#key-value')||{}).textContent?.includes('"blue"')`),
		until(`document.querySelectorAll('#key-history tbody tr').length === 1`),
		br.screenshot("keys"),
		chromedp.Click(css("#edit-key")),
		chromedp.WaitVisible(css("#edit-value")),
		chromedp.SetValue(css("#edit-value"), `{"color":"green","replicas":3}`),
		chromedp.Click(css("#save-key")),
		until(`document.querySelector('#key-version')?.textContent === '2' && document.querySelector('#key-value').textContent.includes('"green"')`),
		until(`document.querySelectorAll('#key-history tbody tr').length === 2 && document.querySelector('#diff-out ins')?.textContent.includes('green')`))

	// The edit arrives in the other tab's watch.
	br.run(watchTab, "see the edit in the watch",
		until(`[...document.querySelectorAll('#watch-events tr')].some(r => r.textContent.includes('app/config') && r.textContent.includes('green'))`),
		br.screenshot("watch"))

	// Pause holds events back until Resume; a watch from a past revision
	// replays history (the first put of app/config, still blue).
	br.run(watchTab, "pause", chromedp.Click(css("#watch-pause")), until(`document.querySelector('#watch-status').textContent.startsWith('paused')`))
	put("app/feature/beta", "paused-write")
	br.run(watchTab, "held while paused",
		until(`document.querySelector('#watch-status').textContent === 'paused, 1 events held'`),
		until(`![...document.querySelectorAll('#watch-events tr')].some(r => r.textContent.includes('paused-write'))`),
		chromedp.Click(css("#watch-pause")),
		until(`[...document.querySelectorAll('#watch-events tr')].some(r => r.textContent.includes('paused-write'))`),
		fill("#watch-filter", "beta"),
		until(`[...document.querySelectorAll('#watch-events tr')].filter(r => !r.hidden).every(r => r.textContent.includes('beta'))`),
		fill("#watch-filter", ""),
		fill("#watch-rev", "1"),
		chromedp.Click(css("#watch-start")),
		until(`[...document.querySelectorAll('#watch-events tr')].some(r => r.textContent.includes('app/config') && r.textContent.includes('"blue"'))`))

	// A hundred events, more than the window shows: the table grows with
	// the page and the page scrolls; its box has no scrollbar of its own
	// (which left the page below it empty).
	feed := make([]map[string]any, 100)
	for i := range feed {
		feed[i] = map[string]any{"request_put": map[string]any{"key": b64(fmt.Sprintf("feed/e%03d", i)), "value": b64("x")}}
	}
	if err := call(ctx, n1, "POST", "/v1/kv/txn", map[string]any{"success": feed}, nil); err != nil {
		t.Fatal(err)
	}
	br.run(watchTab, "a watch with many events",
		chromedp.Navigate(ui+"#/watch?key=feed%2F&rev=1"),
		until(`document.querySelectorAll('#watch-events tr').length === 100`))
	type scroll struct {
		Box  float64 `json:"box"`
		Page float64 `json:"page"`
	}
	sc := get(br, watchTab, "watch scroll", chromedp.Evaluate[scroll](`(box => ({
		box: box.scrollHeight - box.clientHeight,
		page: document.scrollingElement.scrollHeight - window.innerHeight,
	}))(document.querySelector('#watch-events').closest('.card'))`))
	if sc.Box > 1 {
		t.Errorf("the watch table scrolls inside its box (%.0f px hidden in it); it should grow with the page", sc.Box)
	}
	if sc.Page <= 0 {
		t.Errorf("100 watch events fit the window without the page scrolling (%.0f px): the table did not grow with the page", sc.Page)
	}

	// A stale edit: someone writes while the form is open; saving says so.
	br.run(br.ctx, "open the editor", chromedp.Click(css("#edit-key")), chromedp.WaitVisible(css("#edit-value")))
	put("app/config", `{"color":"red"}`)
	br.run(br.ctx, "stale save is a conflict",
		chromedp.SetValue(css("#edit-value"), `{"color":"purple"}`),
		chromedp.Click(css("#save-key")),
		until(`document.querySelector('#conflict')?.textContent.includes('changed by someone else')`))
	var kv struct {
		Kvs []struct{ Value string }
	}
	if err := call(ctx, n1, "POST", "/v1/kv/range", map[string]any{"key": b64("app/config")}, &kv); err != nil || len(kv.Kvs) != 1 || kv.Kvs[0].Value != b64(`{"color":"red"}`) {
		t.Errorf("after the refused save app/config is %+v (%v), want the other writer's value", kv, err)
	}

	// Locks: the holder and the waiter behind it; the election's leader.
	br.run(br.ctx, "locks page",
		chromedp.Navigate(ui+"#/locks"),
		until(`document.querySelector('[data-holder="invoice:101"]')?.textContent === 'worker-a'`),
		until(`document.querySelector('[data-waiters="invoice:101"]')?.textContent.includes('worker-b')`),
		until(`document.querySelector('[data-election="scheduler"]')?.textContent.includes('10.0.0.1:8080')`),
		// Granted at: the grant's time (the raft entry's) and revision.
		until(`/\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/.test(document.querySelector('[data-granted="invoice:101"]')?.textContent) && /at revision \d+/.test(document.querySelector('[data-granted="invoice:101"]').textContent)`),
		br.screenshot("locks"))

	// The lock's key has no value: opening it from the Locks page shows who
	// holds it (owner, fencing token, lease, time left, waiters), not
	// only that the key does not exist.
	var held struct {
		Held   bool
		Holder struct{ Owner, Token, Lease string }
	}
	if err := call(ctx, n1, "POST", "/v1/lock/describe", map[string]any{"key": b64("invoice:101")}, &held); err != nil || !held.Held {
		t.Fatalf("describe the lock invoice:101: %+v %v", held, err)
	}
	br.run(br.ctx, "a locked key without a value",
		chromedp.Click(css(`[data-lock="invoice:101"] a`)),
		until(`(q => q('#key-lock-holder') === 'worker-a' && q('#key-lock-token') === `+jsString(held.Holder.Token)+` &&
			q('#key-lock-lease').startsWith(`+jsString(held.Holder.Lease+" (")+`) && / \(\d+m(\d+s)? left\)$/.test(q('#key-lock-lease')) &&
			q('#key-lock-waiters') === '1 waiting')(s => document.querySelector(s)?.textContent || '')`))

	// Leases: revoke the presence lease; its key vanishes.
	id := jsString(lease.ID)
	br.run(br.ctx, "leases page",
		chromedp.Navigate(ui+"#/leases"),
		until(`document.querySelector('[data-lease=`+id+`]')?.textContent.includes('dkv.presence/web/web-2')`),
		// The granted TTL in h/m/s, as the CLI writes durations (300000
		// ms: "5m", not "5 min 0 s").
		until(`document.querySelector('[data-lease=`+id+`] td:nth-child(2)')?.textContent === '5m'`),
		br.screenshot("leases"),
		chromedp.Click(css(`[data-revoke=`+id+`]`)),
		chromedp.Click(css(`[data-confirm-revoke=`+id+`]`)),
		until(`!document.querySelector('[data-lease=`+id+`]')`),
		chromedp.Navigate(ui+"#/keys?p=dkv.presence%2Fweb%2F"),
		until(`document.querySelector('#key-count')?.textContent.startsWith('0 keys')`))
	var gone struct{ Kvs []any }
	if err := call(ctx, n1, "POST", "/v1/kv/range", map[string]any{"key": b64("dkv.presence/web/web-2")}, &gone); err != nil || len(gone.Kvs) != 0 {
		t.Errorf("after the revoke the leased key reads %+v (%v), want it gone", gone, err)
	}

	br.run(br.ctx, "recipes page",
		chromedp.Navigate(ui+"#/recipes"),
		until(`document.querySelector('#flags')?.textContent.includes('checkout')`),
		until(`document.querySelector('[data-queue="emails"]')?.textContent.includes('1') && document.querySelector('[data-dead="emails"]')?.textContent.includes('smtp: connection timed out')`),
		until(`document.querySelector('[data-ratelimit="api/ann"]')?.textContent.includes('full in')`),
		until(`document.querySelector('[data-flag-rollout="checkout"]')?.textContent.includes('25% get on')`),
		// The canary's decision log: each decisive record a row, in order.
		until(`document.querySelector('[data-canary-decision="checkout/3"]')?.textContent.includes('rollback') && document.querySelector('[data-canary-decision="checkout/3"]').textContent.includes('28/551 (5.08%)')`),
		until(`[...document.querySelectorAll('[data-canary="checkout"] tbody tr')].map((r) => r.dataset.canaryDecision).join() === 'checkout/1,checkout/3'`),
		until(`document.querySelector('[data-canary="checkout"]')?.textContent.includes('2 decisions, and 1 wait for enough canary requests')`),
		br.fullScreenshot("recipes"))

	// Edit the flag's rollout in its form: saved with compare-and-set.
	br.run(br.ctx, "edit a flag's rollout",
		chromedp.Click(css(`[data-edit-flag="checkout"]`)),
		chromedp.WaitVisible(css("#flag-rollout-percent")),
		fill("#flag-rollout-percent", "60"),
		chromedp.Click(css("#flag-add-rule")),
		fill(`#flag-rules tr:last-child [data-f="attribute"]`, "country"),
		chromedp.SetValue(css(`#flag-rules tr:last-child [data-f="op"]`), "in"),
		fill(`#flag-rules tr:last-child [data-f="values"]`, "NL, BE"),
		br.fullScreenshot("flag-form"),
		chromedp.Click(css("#flag-save")),
		until(`document.querySelector('[data-flag-rollout="checkout"]')?.textContent.includes('60% get on') && document.querySelector('[data-flag="checkout"]').textContent.includes('country in NL, BE')`))
	var flag struct {
		Kvs []struct {
			Value   []byte
			Version string
		}
	}
	if err := call(ctx, n1, "POST", "/v1/kv/range", map[string]any{"key": b64("dkv.flags/checkout")}, &flag); err != nil || len(flag.Kvs) != 1 {
		t.Fatalf("read the flag: %+v %v", flag, err)
	}
	want := `{"key":"checkout","type":"bool","variants":{"off":false,"on":true},"defaultVariant":"off","offVariant":"off","enabled":true,"rules":[{"attribute":"plan","op":"eq","values":["beta"],"variant":"on"},{"attribute":"country","op":"in","values":["NL","BE"],"variant":"off"}],"rollout":{"variant":"on","percent":60}}`
	if string(flag.Kvs[0].Value) != want {
		t.Errorf("the saved flag is\n  %s\nwant\n  %s", flag.Kvs[0].Value, want)
	}
	// A stale form: someone else writes the flag while it is open.
	br.run(br.ctx, "open the flag form", chromedp.Click(css(`[data-edit-flag="checkout"]`)), chromedp.WaitVisible(css("#flag-rollout-percent")))
	put("dkv.flags/checkout", want)
	br.run(br.ctx, "stale flag save is a conflict",
		fill("#flag-rollout-percent", "90"),
		chromedp.Click(css("#flag-save")),
		until(`document.querySelector('#flag-conflict')?.textContent.includes('changed by someone else')`),
		chromedp.Click(css("#flag-conflict button")),
		until(`!document.querySelector('#flag-conflict') && document.querySelector('[data-flag-rollout="checkout"]')?.textContent.includes('60% get on')`))

	// Requeue the dead letter: it leaves the dead letters and is visible
	// again, attempts reset.
	br.run(br.ctx, "requeue a dead job",
		chromedp.Click(css(`[data-requeue="0000018f2b3c4d5e6a7b8c9d"]`)),
		until(`!!document.querySelector('[data-requeued="0000018f2b3c4d5e6a7b8c9d"]') || !document.querySelector('[data-dead="emails"]')`),
		until(`(r => r && r.children[1].textContent === '1' && r.children[4].textContent === '0')(document.querySelector('[data-queue="emails"]'))`),
		until(`!document.querySelector('[data-dead="emails"]')`))
	var jobs struct {
		Kvs []struct {
			Key, Value []byte
		}
	}
	if err := call(ctx, n1, "POST", "/v1/kv/range", map[string]any{"key": b64("dkv.queue/emails/"), "range_end": b64("dkv.queue/emails0")}, &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Kvs) != 1 || !strings.HasPrefix(string(jobs.Kvs[0].Key), "dkv.queue/emails/j/7fffffff") || !strings.HasSuffix(string(jobs.Kvs[0].Key), "0000018f2b3c4d5e6a7b8c9d") ||
		strings.Contains(string(jobs.Kvs[0].Value), `"attempt"`) || strings.Contains(string(jobs.Kvs[0].Value), `"dead_ms"`) {
		t.Errorf("after the requeue the queue holds %q, want one visible job 0000018f2b3c4d5e6a7b8c9d with its attempts reset", jobs.Kvs)
	}

	// Phone width: nothing wider than the screen, the menu still there.
	for _, page := range []string{"cluster", "keys?p=app%2F&k=app%2Fconfig", "recipes"} {
		br.run(br.ctx, "phone width "+page,
			chromedp.EmulateViewport(390, 844),
			chromedp.Navigate(ui+"#/"+page),
			until(`!!document.querySelector('#members tr[data-member], #key-value, #ratelimits tr[data-ratelimit]')`))
		if page == "keys?p=app%2F&k=app%2Fconfig" {
			br.run(br.ctx, "phone screenshot", br.screenshot("phone"))
		}
		if page == "recipes" {
			br.run(br.ctx, "phone width flag form", chromedp.Click(css(`[data-edit-flag="checkout"]`)), chromedp.WaitVisible(css("#flag-rollout-percent")), br.screenshot("phone-flag-form"))
		}
		overflow := get(br, br.ctx, "overflow", chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
		if overflow {
			t.Errorf("page %s is wider than a 390 px screen", page)
		}
	}
	// The members table on a 375 px phone: no sideways scrolling, and no
	// field squeezed into a narrow column, one word a line, which made
	// every row very tall. Lines are counted from the text's own boxes.
	br.run(br.ctx, "members at phone width",
		chromedp.EmulateViewport(375, 812),
		chromedp.Navigate(ui+"#/cluster"),
		until(`document.querySelectorAll('#members tr[data-member]').length === 3`),
		until(`[...document.querySelectorAll('#members tr[data-member]')].every(r => /\d (B|KiB|MiB|GiB)/.test(r.querySelector('[data-size]')?.textContent || ''))`),
		until(`document.querySelector('#toast').children.length === 0`), // the toasts of the steps before
		br.screenshot("phone-members"))
	type field struct {
		Member string `json:"member"`
		Name   string `json:"name"`
		Lines  int    `json:"lines"`
	}
	type layout struct {
		Sideways float64 `json:"sideways"`
		Fields   []field `json:"fields"`
		Tallest  float64 `json:"tallest"`
		Screen   float64 `json:"screen"`
	}
	lo := get(br, br.ctx, "members layout", chromedp.Evaluate[layout](`(card => {
		// lines: how many lines the element's text takes (boxes that
		// overlap vertically are one line, whatever their font).
		const lines = (el) => {
			const boxes = [];
			const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
			for (let n; (n = w.nextNode());) {
				if (!n.data.trim()) continue;
				const r = document.createRange();
				r.selectNodeContents(n);
				boxes.push(...[...r.getClientRects()].filter((b) => b.width > 0 && b.height > 0));
			}
			boxes.sort((a, b) => a.top - b.top);
			let n = 0, bottom = -Infinity;
			for (const b of boxes) { if (b.top >= bottom - 1) { n++; bottom = b.bottom; } else bottom = Math.max(bottom, b.bottom); }
			return n;
		};
		const names = [...card.querySelectorAll('thead th')].map((th) => th.textContent);
		const rows = [...card.querySelectorAll('tr[data-member]')];
		return {
			sideways: card.scrollWidth - card.clientWidth,
			fields: rows.flatMap((tr) => [...tr.children].map((td, i) => ({ member: tr.dataset.member, name: names[i], lines: lines(td) }))),
			tallest: Math.max(...rows.map((tr) => tr.getBoundingClientRect().height)),
			screen: window.innerHeight,
		};
	})(document.querySelector('#members'))`))
	if lo.Sideways > 1 {
		t.Errorf("at 375 px the members table scrolls sideways by %.0f px", lo.Sideways)
	}
	for _, f := range lo.Fields {
		if f.Lines > 2 {
			t.Errorf("at 375 px %s's %q takes %d lines, want at most 2", f.Member, f.Name, f.Lines)
		}
	}
	if len(lo.Fields) < 3*9 {
		t.Errorf("measured %d member fields, want 9 for each of 3 members", len(lo.Fields))
	}
	if lo.Tallest > lo.Screen/2 {
		t.Errorf("at 375 px a member takes %.0f px, more than half the %.0f px screen", lo.Tallest, lo.Screen)
	}

	// Keyboard: the first Tab reaches the skip link, the next the menu.
	br.run(br.ctx, "keyboard", chromedp.EmulateViewport(1280, 800), chromedp.Navigate(ui+"#/cluster"),
		until(`!!document.querySelector('#leader-name')`),
		chromedp.KeyEvent("\t"), chromedp.KeyEvent("\t"))
	focused := get(br, br.ctx, "focus", chromedp.Evaluate[string](`document.activeElement.textContent`))
	if focused != "Cluster" {
		t.Errorf("after two Tabs the focus is on %q, want the Cluster menu entry", focused)
	}
	wcancel()
	br.checkErrors()
}
