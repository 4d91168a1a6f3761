package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"sync"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// Config is one run of the scenario.
type Config struct {
	Prefix         string // the sessions live under it
	ConcurrentAdds int    // the fault: this many adds to one cart at once
	Log            *exenv.Log
	// DKVFlags, if not empty, are the dkv CLI's flags to reach the
	// cluster, for the command the run prints to read the carts after
	// it; an embedded store is gone by then, so without them there is
	// none.
	DKVFlags string
}

// Report is what the shop answered.
type Report struct {
	// Answers are the sequence's answers, in order (which instance and
	// the cart it showed).
	Answers []Cart
	// AfterConcurrent is the cart after the concurrent adds.
	AfterConcurrent []string
}

// Run plays the scenario on env and returns what the shop answered.
func Run(ctx context.Context, env *exenv.Env, cfg Config) (*Report, error) {
	log := cfg.Log
	log.Say("Two instances of a web shop, A and B, behind a round-robin proxy: requests")
	log.Say("alternate A, B, A, B... The carts are sessions in DKV (the session store recipe),")
	log.Say("so no instance keeps one in memory. (All in this process; to run each instance and the")
	log.Say("proxy as a process of its own, see --instance and --proxy in README.md.)\n")
	start := func(name string) (*shop, error) {
		c, err := env.NewClient(ctx)
		if err != nil {
			return nil, err
		}
		s, err := startShop(name, cfg.Prefix+"session/", "127.0.0.1:0", c, nil)
		if err != nil {
			c.Close()
		}
		return s, err
	}
	a, err := start("A")
	if err != nil {
		return nil, err
	}
	defer func() { a.stop() }()
	b, err := start("B")
	if err != nil {
		return nil, err
	}
	defer func() { b.stop() }()
	lb := newProxy(nil, a.addr, b.addr)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	front := &http.Server{Handler: lb.handler()}
	go front.Serve(ln)
	defer front.Close()
	base := "http://" + ln.Addr().String()
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar} // one shopper: the session cookie goes with every request

	rep := &Report{}
	step := func(method, path, what string) error {
		cart, err := doCart(ctx, browser, method, base+path)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		rep.Answers = append(rep.Answers, *cart)
		log.Printf("%-12s -> answered by %s: %s", what, cart.Instance, show(cart.Items))
		return nil
	}
	for _, s := range []struct{ method, path, what string }{
		{"POST", "/cart/add?item=Buch", "add Buch"},
		{"POST", "/cart/add?item=Stift", "add Stift"},
		{"GET", "/cart", "get"},
		{"GET", "/cart", "get"},
		{"POST", "/cart/add?item=Heft", "add Heft"},
	} {
		if err := step(s.method, s.path, s.what); err != nil {
			return nil, err
		}
	}
	log.Printf("instance B stops; a fresh instance B2 (a new server and DKV client, nothing in memory) takes its place")
	b.stop()
	if b, err = start("B2"); err != nil {
		return nil, err
	}
	lb.set(1, b.addr)
	for range 2 {
		if err := step("GET", "/cart", "get"); err != nil {
			return nil, err
		}
	}

	log.Printf("now %d adds to the same cart at once, spread over both instances", cfg.ConcurrentAdds)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.ConcurrentAdds)
	for i := range cfg.ConcurrentAdds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := doCart(ctx, browser, "POST", fmt.Sprintf("%s/cart/add?item=pen-%03d", base, i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("concurrent add: %w", err)
	}
	cart, err := doCart(ctx, browser, "GET", base+"/cart")
	if err != nil {
		return nil, err
	}
	rep.AfterConcurrent = cart.Items
	log.Printf("the cart now holds %d items (3 before, %d added): %d lost", len(cart.Items), cfg.ConcurrentAdds,
		3+cfg.ConcurrentAdds-len(cart.Items))
	if cfg.DKVFlags != "" {
		log.Say("\nSessions: %ssession/ (read them with: dkv %s get %ssession/ --prefix)", cfg.Prefix, cfg.DKVFlags, cfg.Prefix)
	}
	return rep, nil
}

func show(items []string) string {
	q := make([]string, len(items))
	for i, it := range items {
		q[i] = "'" + it + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}
