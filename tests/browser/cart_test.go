package browser

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestCartBehindProxy shops in examples/cart through its proxy, each
// instance and the proxy a process of its own, against a 3-member
// cluster: items added in the browser are on the page whichever
// instance answers, and after one instance is killed with SIGKILL
// midway, adding goes on and every reload shows the whole cart, from the
// instances left.
func TestCartBehindProxy(t *testing.T) {
	br := newBrowser(t)
	c := startCluster(t)
	bin := testutil.ProgramBinary(t, "./examples/cart", testutil.Race)
	dir := t.TempDir()
	eps := strings.Join(c.ClientAddrs(), ",")
	procs := map[string]*testutil.Process{}
	var backends []string
	for _, name := range []string{"A", "B", "C"} {
		addr := testutil.FreeAddr(t)
		backends = append(backends, addr)
		procs[name] = testutil.StartProcess(t, filepath.Join(dir, name+".log"), bin,
			"--endpoints", eps, "--instance", name, "--listen", addr, "--prefix", "browser/")
		waitHTTP(t, "instance "+name, procs[name], "http://"+addr+"/cart")
	}
	proxyAddr := testutil.FreeAddr(t)
	proxy := testutil.StartProcess(t, filepath.Join(dir, "proxy.log"), bin,
		"--proxy", "--listen", proxyAddr, "--backends", strings.Join(backends, ","))
	procs["proxy"] = proxy
	t.Cleanup(func() {
		for _, p := range procs {
			p.Kill()
		}
		if t.Failed() {
			for _, name := range []string{"A", "B", "C", "proxy"} {
				t.Logf("%s log:\n%s", name, procs[name].LogTail(15))
			}
		}
	})
	shop := "http://" + proxyAddr + "/"
	waitHTTP(t, "the proxy", proxy, shop+"cart")

	var want []string
	answered := map[string]bool{}
	// page reads what the page shows: the instance that served it and
	// the cart.
	page := func(step string) (string, []string) {
		t.Helper()
		inst := get(br, br.ctx, step+": instance", chromedp.Text(css("#instance")))
		items := get(br, br.ctx, step+": items", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#items li')].map(li => li.textContent)`))
		return inst, items
	}
	add := func(item string) {
		t.Helper()
		want = append(want, item)
		br.run(br.ctx, "add "+item,
			chromedp.WaitVisible(css("#item")),
			chromedp.SetValue(css("#item"), item),
			clickAndLoad("#add"), // posts the form; the answer redirects to the page
			until(fmt.Sprintf(`document.querySelector('#count')?.dataset.n === '%d'`, len(want))))
		inst, items := page("after adding " + item)
		answered[inst] = true
		if !slices.Equal(items, want) {
			t.Fatalf("after adding %s the page (from instance %s) shows %v, want %v", item, inst, items, want)
		}
	}
	br.run(br.ctx, "open the shop", chromedp.Navigate(shop), until(`document.querySelector('#count')?.dataset.n === '0'`))
	add("Buch")
	add("Stift")
	add("Heft")

	procs["B"].Kill()
	t.Log("instance B killed (SIGKILL)")
	add("Kuli")
	add("Lineal")
	for i := range 6 {
		br.run(br.ctx, fmt.Sprintf("reload %d", i+1), chromedp.Reload(), until(`document.querySelector('#count')?.dataset.n !== undefined`))
		inst, items := page(fmt.Sprintf("reload %d", i+1))
		if inst == "B" {
			t.Errorf("reload %d was served by instance B, which is dead", i+1)
		}
		answered[inst+" after the kill"] = true
		if !slices.Equal(items, want) {
			t.Errorf("reload %d (from instance %s) shows %v, want the whole cart %v", i+1, inst, items, want)
		}
	}
	if !answered["A after the kill"] || !answered["C after the kill"] {
		t.Errorf("after the kill the reloads were served by %v, want both A and C", answered)
	}
	br.checkErrors()
}

// clickAndLoad clicks sel and waits for the page it leads to to load: a
// poll started before the navigation would end with the old page.
func clickAndLoad(sel string) chromedp.Action[chromedp.Void] {
	wait := chromedp.WaitEvent(page.LoadEventFired, nil, chromedp.Click(css(sel)))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := wait(ctx, t)
		return chromedp.Void{}, err
	}
}

// waitHTTP waits until url answers 200, failing the test if p exits
// first.
func waitHTTP(t *testing.T, what string, p *testutil.Process, url string) {
	t.Helper()
	testutil.EventuallyNoError(t, 60*time.Second, what+" serving", func(ctx context.Context) error {
		if !p.Running() {
			t.Fatalf("%s exited: %v\n%s", what, p.Err(), p.LogTail(15))
		}
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}
