package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/proctest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// cartProcs are three cart instance processes and the proxy process in
// front of them, against a 3-member cluster of dkv processes.
type cartProcs struct {
	cluster   *testutil.Cluster
	instances map[string]*testutil.Process
	addrs     map[string]string // instance name -> its --listen
	proxy     *testutil.Process
	base      string // the proxy's URL
}

func startCartProcs(t *testing.T) *cartProcs {
	t.Helper()
	bin := testutil.ProgramBinary(t, "./examples/cart", testutil.Race)
	c, _, eps := proctest.Cluster(t)
	dir := t.TempDir()
	p := &cartProcs{cluster: c, instances: map[string]*testutil.Process{}, addrs: map[string]string{}}
	var backends []string
	for _, name := range []string{"A", "B", "C"} {
		addr := testutil.FreeAddr(t)
		p.addrs[name] = addr
		backends = append(backends, addr)
		p.instances[name] = testutil.StartProcess(t, filepath.Join(dir, name+".log"), bin,
			"--endpoints", eps, "--instance", name, "--listen", addr, "--prefix", "test/")
	}
	proxyAddr := testutil.FreeAddr(t)
	p.proxy = testutil.StartProcess(t, filepath.Join(dir, "proxy.log"), bin,
		"--proxy", "--listen", proxyAddr, "--backends", strings.Join(backends, ","))
	p.base = "http://" + proxyAddr
	t.Cleanup(func() {
		p.proxy.Kill()
		for _, in := range p.instances {
			in.Kill()
		}
		if t.Failed() {
			t.Logf("logs:%s", p.logs())
		}
	})
	for name, addr := range p.addrs {
		p.waitServing(t, "instance "+name, p.instances[name], "http://"+addr)
	}
	p.waitServing(t, "the proxy", p.proxy, p.base)
	return p
}

// waitServing waits until proc, serving at base, answers GET /cart.
func (p *cartProcs) waitServing(t *testing.T, name string, proc *testutil.Process, base string) {
	t.Helper()
	testutil.EventuallyNoError(t, 60*time.Second, name+" serving", func(ctx context.Context) error {
		if !proc.Running() {
			t.Fatalf("%s exited: %v%s", name, proc.Err(), p.logs())
		}
		_, err := getCart(ctx, http.DefaultClient, base)
		return err
	})
}

func (p *cartProcs) logs() string {
	var b strings.Builder
	for _, name := range []string{"A", "B", "C"} {
		if in := p.instances[name]; in != nil {
			fmt.Fprintf(&b, "\ninstance %s:\n%s", name, in.LogTail(15))
		}
	}
	fmt.Fprintf(&b, "\nproxy:\n%s%s", p.proxy.LogTail(25), p.cluster.Logs(10))
	return b.String()
}

// shopper is one client of the shop, with the session cookie in jar;
// two shoppers sharing a jar are one user on two devices (or tabs).
func shopper(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
}

// addManyT is addMany for a test: any failure other than a 502 fails it.
func addManyT(t *testing.T, ctx context.Context, shoppers [2]*http.Client, base, prefix string, n, workers int, after func(int)) (ok, unknown []string) {
	t.Helper()
	res := addMany(ctx, shoppers[:], base, prefix, n, workers, 0, after)
	if len(res.failed) > 0 {
		t.Fatalf("%d adds failed: %v", len(res.failed), errors.Join(res.failed...))
	}
	return res.ok, res.unknown
}

// TestCartProcesses is the scenario as real processes: three instances
// and a round-robin proxy, each a cart process, in front of a 3-member
// dkv cluster. 100 concurrent adds to one cart from two shoppers lose
// none; an instance killed with SIGKILL in the middle of another 100
// loses none that were answered, and the adds after it all succeed,
// served by the two left; every reload shows the whole cart; the
// survivors exit cleanly on SIGTERM.
func TestCartProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs dkv and cart processes")
	}
	p := startCartProcs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	jar, _ := cookiejar.New(nil)
	shoppers := [2]*http.Client{shopper(jar), shopper(jar)}
	// The first add makes the session; both shoppers carry its cookie.
	if _, err := addItem(ctx, shoppers[0], p.base, "Buch"); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"Buch": 1}

	ok, unknown := addManyT(t, ctx, shoppers, p.base, "pen", 100, 25, nil)
	if len(unknown) > 0 {
		t.Fatalf("with every instance up, the proxy answered 502 to %d adds: %v%s", len(unknown), unknown, p.logs())
	}
	for _, it := range ok {
		want[it]++
	}
	cart, err := getCart(ctx, shoppers[0], p.base)
	if err != nil {
		t.Fatal(err)
	}
	checkCart(t, "after 100 concurrent adds", cart.Items, want, nil)
	if lost := 101 - len(cart.Items); lost != 0 {
		t.Fatalf("after 100 concurrent adds through three instance processes the cart holds %d of 101 items: %d lost", len(cart.Items), lost)
	}

	// Kill B mid-way through another 100 adds, a few at a time.
	var killOnce sync.Once
	ok, unknown = addManyT(t, ctx, shoppers, p.base, "ink", 100, 2, func(i int) {
		if i == 40 {
			killOnce.Do(p.instances["B"].Kill)
		}
	})
	if p.instances["B"].Running() {
		t.Fatal("instance B was not killed")
	}
	// A request B had when it died is answered 502: it may or may not
	// have landed. There are at most as many as were in flight.
	if len(unknown) > 4 {
		t.Errorf("%d adds answered 502 around the kill, more than the 4 in flight: %v", len(unknown), unknown)
	}
	for _, it := range ok {
		want[it]++
	}
	t.Logf("instance B killed after 40 adds; %d of the next 100 answered, %d answered 502 (in flight at B)", len(ok), len(unknown))
	maybe := toSet(unknown)

	// After the kill every add succeeds: the proxy skips the dead instance.
	ok, unknown = addManyT(t, ctx, shoppers, p.base, "cap", 20, 1, nil)
	if len(unknown) > 0 {
		t.Errorf("after B's death the proxy answered 502 to %d adds, want none (it should skip the dead instance): %v", len(unknown), unknown)
	}
	for _, it := range ok {
		want[it]++
	}

	// Every reload shows the whole cart, from A or C.
	var first []string
	answered := map[string]bool{}
	for i := range 6 {
		cart, err := getCart(ctx, shoppers[i%2], p.base)
		if err != nil {
			t.Fatalf("reload %d: %v", i+1, err)
		}
		answered[cart.Instance] = true
		checkCart(t, fmt.Sprintf("reload %d (from %s)", i+1, cart.Instance), cart.Items, want, maybe)
		if first == nil {
			first = cart.Items
		} else if !slices.Equal(cart.Items, first) {
			t.Errorf("reload %d (from %s) shows a different cart than reload 1: %v, then %v", i+1, cart.Instance, first, cart.Items)
		}
	}
	if answered["B"] || !answered["A"] || !answered["C"] {
		t.Errorf("reloads were answered by %v, want A and C (B is dead)", answered)
	}

	// The survivors and the proxy exit cleanly on SIGTERM.
	for _, name := range []string{"A", "C"} {
		p.instances[name].Stop()
		if err := p.instances[name].Err(); err != nil {
			t.Errorf("instance %s on SIGTERM: %v\n%s", name, err, p.instances[name].LogTail(5))
		}
	}
	p.proxy.Stop()
	if err := p.proxy.Err(); err != nil {
		t.Errorf("proxy on SIGTERM: %v\n%s", err, p.proxy.LogTail(5))
	}
}

// checkCart fails the test unless items holds each item of want exactly
// once, and each of maybe (adds of unknown outcome) at most once, and
// nothing else.
func checkCart(t *testing.T, when string, items []string, want map[string]int, maybe map[string]bool) {
	t.Helper()
	if c := checkItems(items, want, maybe); !c.whole() {
		t.Errorf("%s the cart holds %d items: %v", when, len(items), c)
	}
}
