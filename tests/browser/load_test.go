package browser

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardLoad100k measures how long the Keys page takes to show a
// prefix of 100,000 keys (the first page of 100, with the count) and the
// root above it. It reports the times; it asserts only that the pages
// load, not how fast (timing depends on the machine).
func TestDashboardLoad100k(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 100,000-key store")
	}
	br := newBrowser(t)
	c := startCluster(t, "--max-txn-ops", "1000")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const keys, perTxn, workers = 100000, 1000, 4
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for b := w; b < keys/perTxn; b += workers {
				var ops []map[string]any
				for i := b * perTxn; i < (b+1)*perTxn; i++ {
					ops = append(ops, map[string]any{"request_put": map[string]any{"key": b64(fmt.Sprintf("big/item-%06d", i)), "value": b64(`{"n":` + strconv.Itoa(i) + `}`)}})
				}
				if err := call(ctx, c.Members[w%3].HTTPAddr, "POST", "/v1/kv/txn", map[string]any{"success": ops}, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("wrote %d keys in %v", keys, time.Since(start).Round(time.Millisecond))
	ui := "http://" + c.Members[0].HTTPAddr + "/ui/"
	br.run(br.ctx, "warm up", chromedp.Navigate(ui+"#/cluster"), until(`!!document.querySelector('#leader-name')`))
	for _, tc := range []struct{ name, hash, want string }{
		{"prefix big/ (100,000 keys)", "#/keys?p=big%2F", "100000 keys"},
		{"root", "#/keys", "100000 keys"},
	} {
		br.run(br.ctx, "blank", chromedp.Navigate("about:blank")) // a full page load, not a hash change
		t0 := time.Now()
		br.run(br.ctx, "load "+tc.name, chromedp.Navigate(ui+tc.hash),
			until(`document.querySelector('#key-count')?.textContent.startsWith(`+jsString(tc.want)+`)`))
		wall := time.Since(t0)
		inPage := get(br, br.ctx, "load time", chromedp.Evaluate[string](`document.body.dataset.keysLoadedMs`))
		listed := get(br, br.ctx, "entries", chromedp.Evaluate[int](`document.querySelectorAll('#key-tree li').length`))
		t.Logf("Keys page, %s: %d entries listed and counted in %s ms in the page; %v from a fresh page load to shown", tc.name, listed, inPage, wall.Round(time.Millisecond))
	}
	br.run(br.ctx, "next page", chromedp.Navigate(ui+"#/keys?p=big%2F"), until(`document.querySelectorAll('#key-tree li').length === 100`),
		chromedp.Click(css("#more-keys")), until(`document.querySelectorAll('#key-tree li').length === 200`))
	br.checkErrors()
}
