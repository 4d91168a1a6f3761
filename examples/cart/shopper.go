package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The shopper is what adds to a cart from outside the shop: the process
// test's shoppers and, as a process of its own (--instance NAME --shop
// URL), the driver's (go run ./examples/run cart). Both add items
// through the proxy and then compare the cart with what was answered.

// errBadGateway is the proxy's answer when an instance failed with the
// request (it may or may not have landed).
var errBadGateway = errors.New("502 from the proxy")

func addItem(ctx context.Context, hc *http.Client, base, item string) (*Cart, error) {
	return doCart(ctx, hc, "POST", base+"/cart/add?item="+url.QueryEscape(item))
}

func getCart(ctx context.Context, hc *http.Client, base string) (*Cart, error) {
	return doCart(ctx, hc, "GET", base+"/cart")
}

func doCart(ctx context.Context, hc *http.Client, method, u string) (*Cart, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusBadGateway:
		return nil, fmt.Errorf("%w: %s", errBadGateway, b)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, b)
	}
	var cart Cart
	if err := json.Unmarshal(b, &cart); err != nil {
		return nil, err
	}
	return &cart, nil
}

// adds is the outcome of addMany.
type adds struct {
	ok      []string // answered 200: the item is in the cart, once
	unknown []string // answered 502: an instance died with it; in the cart at most once
	failed  []error  // anything else
}

// addMany adds n items named prefix-NNN through the shoppers at once,
// each with workers requests in flight and pause between two of a
// worker's, and calls after(i) after the i-th answered add.
func addMany(ctx context.Context, shoppers []*http.Client, base, prefix string, n, workers int, pause time.Duration, after func(int)) adds {
	items := make(chan string)
	go func() {
		defer close(items)
		for i := range n {
			select {
			case items <- fmt.Sprintf("%s-%03d", prefix, i):
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		mu   sync.Mutex
		res  adds
		done atomic.Int64
		wg   sync.WaitGroup
	)
	for _, hc := range shoppers {
		for range workers {
			wg.Go(func() {
				for item := range items {
					_, err := addItem(ctx, hc, base, item)
					mu.Lock()
					switch {
					case err == nil:
						res.ok = append(res.ok, item)
					case errors.Is(err, errBadGateway):
						res.unknown = append(res.unknown, item)
					default:
						res.failed = append(res.failed, fmt.Errorf("add %s: %w", item, err))
					}
					mu.Unlock()
					if err == nil && after != nil {
						after(int(done.Add(1)))
					}
					if pause > 0 {
						select {
						case <-time.After(pause):
						case <-ctx.Done():
						}
					}
				}
			})
		}
	}
	wg.Wait()
	return res
}

// cartCheck is a cart compared with the adds answered.
type cartCheck struct {
	lost, twice, extra []string
}

func (c cartCheck) whole() bool { return len(c.lost)+len(c.twice)+len(c.extra) == 0 }

func (c cartCheck) String() string {
	return fmt.Sprintf("%d answered adds lost %v, %d twice %v, %d never added %v",
		len(c.lost), c.lost, len(c.twice), c.twice, len(c.extra), c.extra)
}

// checkItems compares items with want (each answered add: exactly once)
// and maybe (adds of unknown outcome: at most once); anything else in
// the cart is extra.
func checkItems(items []string, want map[string]int, maybe map[string]bool) cartCheck {
	got := map[string]int{}
	for _, it := range items {
		got[it]++
	}
	var c cartCheck
	for it := range want {
		switch got[it] {
		case 0:
			c.lost = append(c.lost, it)
		case 1:
		default:
			c.twice = append(c.twice, it)
		}
	}
	for it, n := range got {
		if want[it] == 0 && !maybe[it] {
			c.extra = append(c.extra, it)
		} else if want[it] == 0 && n > 1 {
			c.twice = append(c.twice, it)
		}
	}
	slices.Sort(c.lost)
	slices.Sort(c.twice)
	slices.Sort(c.extra)
	return c
}

// shopperConfig is a shopper process (--instance NAME --shop URL).
type shopperConfig struct {
	Name    string
	Shop    string // the proxy's URL
	Session string // the session cookie to shop with: another shopper's cart
	Adds    int
	Workers int
	Pause   time.Duration
}

// runShopper adds cfg.Adds items named NAME-NNN to the cart of the
// session cfg.Session through the shop, saying every tenth answered add,
// then reads the cart and says which of its own adds it holds. It does
// not judge other shoppers' items: several shop on one cart at once.
func runShopper(ctx context.Context, cfg shopperConfig, emit func(string, ...any)) error {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	u, err := url.Parse(cfg.Shop)
	if err != nil {
		return err
	}
	jar := &sessionJar{token: cfg.Session}
	hc.Jar = jar
	emit("shopping", "url", cfg.Shop, "adds", cfg.Adds, "workers", cfg.Workers, "session", short(cfg.Session))
	res := addMany(ctx, []*http.Client{hc}, cfg.Shop, cfg.Name, cfg.Adds, cfg.Workers, cfg.Pause, func(i int) {
		if i%10 == 0 {
			emit("added", "answered", i)
		}
	})
	if ctx.Err() != nil {
		return nil // stopped midway: nothing to judge
	}
	cart, err := getCart(ctx, hc, cfg.Shop)
	if err != nil {
		return fmt.Errorf("reading the cart at %s: %w", u, err)
	}
	want := map[string]int{}
	for _, it := range res.ok {
		want[it]++
	}
	var mine []string
	for _, it := range cart.Items {
		if strings.HasPrefix(it, cfg.Name+"-") {
			mine = append(mine, it)
		}
	}
	c := checkItems(mine, want, toSet(res.unknown))
	verdict := "whole"
	if !c.whole() || len(res.failed) > 0 {
		verdict = "BROKEN"
	}
	emit("shopped", "answered", len(res.ok), "unknown", len(res.unknown), "failed", len(res.failed),
		"in_cart", len(mine), "lost", len(c.lost), "twice", len(c.twice), "extra", len(c.extra),
		"cart", verdict, "by", cart.Instance)
	if len(res.failed) > 0 {
		emit("failures", "err", errors.Join(res.failed...))
	}
	return nil
}

func toSet(items []string) map[string]bool {
	m := map[string]bool{}
	for _, it := range items {
		m[it] = true
	}
	return m
}

// sessionJar sends one session cookie, and keeps the one the shop sets
// if it had none.
type sessionJar struct {
	mu    sync.Mutex
	token string
}

func (j *sessionJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, c := range cs {
		if c.Name == "sid" && j.token == "" {
			j.token = c.Value
		}
	}
}

func (j *sessionJar) Cookies(*url.URL) []*http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.token == "" {
		return nil
	}
	return []*http.Cookie{{Name: "sid", Value: j.token}}
}
