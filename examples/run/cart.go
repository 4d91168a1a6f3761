package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// cart puts a proxy process in front of the three shop instances, has
// two shopper processes add 50 items each to one cart at once through
// it, kills one instance with kill -9 in the middle, and shows the cart
// whole on every reload: each answered add in it once, none lost.
func cart(d *driver) error {
	const wait = time.Minute
	var backends []string
	for _, name := range []string{"A", "B", "C"} {
		_, l, err := d.wait(wait, name+" listening", 0, is("listening", name))
		if err != nil {
			return err
		}
		backends = append(backends, strings.TrimPrefix(l.Get("url"), "http://"))
	}
	if _, err := d.g.Start("proxy", "--proxy", "--backends", strings.Join(backends, ",")); err != nil {
		return err
	}
	_, l, err := d.wait(wait, "the proxy listening", 0, is("listening", "proxy"))
	if err != nil {
		return err
	}
	shop := l.Get("url")

	// The first add makes the cart; its session cookie goes to both
	// shoppers: one user on two devices.
	sid, first, err := firstAdd(d.ctx, shop, "Buch")
	if err != nil {
		return err
	}
	d.say("added Buch through the proxy (answered by %s): the cart's session is %s…; two shoppers now add 50 items each to it at once", first.Instance, sid[:6])
	for _, s := range []string{"s1", "s2"} {
		if _, err := d.g.Start(s, "--shop", shop, "--session", sid, "--adds", "50", "--workers", "5", "--pause", "50ms"); err != nil {
			return err
		}
	}
	if _, _, err := d.wait(wait, "the shoppers' adds", 0, func(e exenv.Event) bool {
		return e.What == "added" && e.Int("answered") >= 20
	}); err != nil {
		return err
	}
	d.kill9(d.g.Instance("B"), "it serves a third of the requests; no cart is in its memory")
	var shopped []exenv.Event
	for _, s := range []string{"s1", "s2"} {
		_, e, err := d.wait(wait, s+"'s tally", 0, is("shopped", s))
		if err != nil {
			return err
		}
		shopped = append(shopped, e)
		d.say("%s: %s adds answered, %s answered 502 (in flight at B when it died: unknown), %s failed; in the cart: %s of its items, %s answered ones lost, %s twice",
			s, e.Get("answered"), e.Get("unknown"), e.Get("failed"), e.Get("in_cart"), e.Get("lost"), e.Get("twice"))
	}

	// Every reload, from whichever instance answers, shows the same cart.
	var carts []shopCart
	by := map[string]bool{}
	for range 4 {
		c, err := getShopCart(d.ctx, shop, sid)
		if err != nil {
			return fmt.Errorf("reloading the cart: %w", err)
		}
		carts = append(carts, *c)
		by[c.Instance] = true
	}
	want := 1
	for _, e := range shopped {
		want += e.Int("in_cart")
	}
	same := true
	for _, c := range carts[1:] {
		same = same && slices.Equal(c.Items, carts[0].Items)
	}
	names := slices.Sorted(maps.Keys(by))
	d.say("4 reloads, answered by %s: %d items each time, the same: %v", strings.Join(names, " and "), len(carts[0].Items), same)
	var broken []string
	for _, e := range shopped {
		if e.Get("cart") != "whole" {
			broken = append(broken, e.Line)
		}
	}
	if n := strings.Count(strings.Join(carts[0].Items, "\n")+"\n", "Buch\n"); n != 1 {
		broken = append(broken, fmt.Sprintf("Buch is in the cart %d times", n))
	}
	if !same || len(carts[0].Items) != want {
		broken = append(broken, fmt.Sprintf("reloads show %d items (want %d), the same each time: %v", len(carts[0].Items), want, same))
	}
	if by["B"] {
		broken = append(broken, "a reload was answered by B, which was killed")
	}
	if len(broken) > 0 {
		return fmt.Errorf("the cart is not whole: %s", strings.Join(broken, "; "))
	}
	d.say("the cart is whole: every answered add in it once, none lost, across the kill of B")
	return nil
}

// shopCart is the shop's answer (examples/cart's Cart).
type shopCart struct {
	Instance string   `json:"instance"`
	Items    []string `json:"items"`
}

// firstAdd adds item to a new cart through the shop at base, and returns
// the cart's session cookie and the shop's answer.
func firstAdd(ctx context.Context, base, item string) (string, *shopCart, error) {
	resp, c, err := cartRequest(ctx, "POST", base+"/cart/add?item="+item, "")
	if err != nil {
		return "", nil, err
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "sid" {
			return ck.Value, c, nil
		}
	}
	return "", nil, fmt.Errorf("the shop set no session cookie")
}

func getShopCart(ctx context.Context, base, sid string) (*shopCart, error) {
	_, c, err := cartRequest(ctx, "GET", base+"/cart", sid)
	return c, err
}

func cartRequest(ctx context.Context, method, u, sid string) (*http.Response, *shopCart, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, nil, err
	}
	if sid != "" {
		req.AddCookie(&http.Cookie{Name: "sid", Value: sid})
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	var c shopCart
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return nil, nil, err
	}
	return resp, &c, nil
}
