package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/proxy"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// metric is the value of an unlabelled metric on the proxy's /metrics.
func metric(t *testing.T, p *proxy.Proxy, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(httpGet(t, "http://"+p.HTTPAddr()+"/metrics")))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

const (
	hits   = "dkv_proxy_read_cache_hits_total"
	misses = "dkv_proxy_read_cache_misses_total"
)

// getSer is a serializable get of key through c.
func getSer(ctx context.Context, c *client.Client, key string) (string, error) {
	kv, err := c.Get(ctx, key, client.WithSerializable())
	if err != nil {
		return "", err
	}
	return string(kv.Value), nil
}

// cached reads key serializably through c until the proxy answers it
// from its cache (the first read starts the identity's watch, so it may
// take a few), and checks the value.
func cached(t *testing.T, p *proxy.Proxy, c *client.Client, key, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	testutil.Eventually(t, waitLong, key+" answered from the cache", func() bool {
		before := metric(t, p, hits)
		got, err := getSer(ctx, c, key)
		if err != nil || got != want {
			t.Fatalf("serializable get %s through the proxy: %q %v, want %q", key, got, err, want)
		}
		return metric(t, p, hits) > before
	})
}

// TestReadCacheHitAndInvalidation: a serializable read is answered from
// the cache after a miss, for DKV's and etcd's Range; a write straight to
// the member reaches readers of the proxy once its watch has the event;
// a linearizable read always goes upstream.
func TestReadCacheHitAndInvalidation(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	direct := servertest.Client(t, nd)
	if _, err := direct.Put(ctx, "c/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	cl := dial(t, p, "", "")
	m0 := metric(t, p, misses)
	cached(t, p, cl, "c/a", "1")
	if metric(t, p, misses) <= m0 {
		t.Error("the first serializable read was not counted as a miss")
	}
	if metric(t, p, "dkv_proxy_read_cache_bytes") <= 0 {
		t.Error("dkv_proxy_read_cache_bytes is 0 with an entry cached")
	}
	h := metric(t, p, hits)
	if _, err := cl.Get(ctx, "c/a"); err != nil {
		t.Fatal(err)
	}
	if metric(t, p, hits) != h {
		t.Error("a linearizable read was answered from the cache")
	}

	// A write that does not pass through the proxy.
	if _, err := direct.Put(ctx, "c/a", []byte("2")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLong, "the direct write seen through the proxy's cache", func() bool {
		got, err := getSer(ctx, cl, "c/a")
		if err != nil {
			t.Fatal(err)
		}
		return got == "2"
	})
	cached(t, p, cl, "c/a", "2")

	// etcd's Range, serializable, over a range.
	conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ekv := etcdserverpb.NewKVClient(conn)
	erange := func() (string, int64) {
		r, err := ekv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("c/"), RangeEnd: []byte("c0"), Serializable: true})
		if err != nil {
			t.Fatal(err)
		}
		var vs []string
		for _, kv := range r.Kvs {
			vs = append(vs, string(kv.Key)+"="+string(kv.Value))
		}
		return strings.Join(vs, ","), r.Header.Revision
	}
	testutil.Eventually(t, waitLong, "etcd range answered from the cache", func() bool {
		before := metric(t, p, hits)
		if got, _ := erange(); got != "c/a=2" {
			t.Fatalf("etcd range c/: %s", got)
		}
		return metric(t, p, hits) > before
	})
	pr, err := direct.Put(ctx, "c/b", []byte("3"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLong, "a new key in the range seen through the proxy", func() bool {
		got, rev := erange()
		if got == "c/a=2,c/b=3" && rev < pr.Revision {
			t.Fatalf("etcd range with c/b at revision %d, older than its write at %d", rev, pr.Revision)
		}
		return got == "c/a=2,c/b=3"
	})
}

// TestReadCacheReadYourWrites: a serializable read through the proxy
// after a write through it returns the write, every time, though the
// proxy's watch may not have the write's event yet.
func TestReadCacheReadYourWrites(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	cl := dial(t, p, "", "")
	if _, err := cl.Put(context.Background(), "ryw", []byte("0")); err != nil {
		t.Fatal(err)
	}
	cached(t, p, cl, "ryw", "0")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for i := 1; i <= 300; i++ {
		v := strconv.Itoa(i)
		if _, err := cl.Put(ctx, "ryw", []byte(v)); err != nil {
			t.Fatal(err)
		}
		got, err := getSer(ctx, cl, "ryw")
		if err != nil {
			t.Fatal(err)
		}
		if got != v {
			t.Fatalf("iteration %d: a serializable read after a write through the proxy returned %q, want %q", i, got, v)
		}
		// Cache the new value, so the next write has an entry to outdate.
		if _, err := getSer(ctx, cl, "ryw"); err != nil {
			t.Fatal(err)
		}
	}
	if metric(t, p, hits) < 2 {
		t.Error("the cache answered almost nothing: the loop did not exercise it")
	}
}

// TestReadCacheIdentityIsolation: root's cached answer is never given to
// alice, who may not read the key: she gets PermissionDenied.
func TestReadCacheIdentityIsolation(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	withAlice(t, nd, func(ctx context.Context, c *client.Client) {
		_, err := c.Put(ctx, "app/bob/secret", []byte("s"))
		must("put app/bob/secret", err)
	})

	p := startProxy(t, "", nd)
	root, alice := dial(t, p, "root", "pw"), dial(t, p, "alice", "pw")
	cached(t, p, root, "app/bob/secret", "s")
	for range 3 {
		if got, err := getSer(ctx, alice, "app/bob/secret"); !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("alice's serializable read of root's cached key: %q %v, want ErrPermissionDenied", got, err)
		}
	}
	// Her own keys work (TestReadCacheRangeWatches: cached range by
	// range, as she may not watch them all).
	_, err := alice.Put(ctx, "app/alice/x", []byte("a"))
	must("alice puts", err)
	if got, err := getSer(ctx, alice, "app/alice/x"); err != nil || got != "a" {
		t.Errorf("alice reads her key: %q %v", got, err)
	}
}

// TestReadCacheBound: the cache never holds more than its bound, and
// evicts the least recently used entries to stay under it.
func TestReadCacheBound(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	const bound = 8 << 10
	p := startProxyWith(t, proxy.Config{ReadCacheBytes: bound}, nd)
	cl := dial(t, p, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	val := strings.Repeat("v", 500)
	if _, err := cl.Put(ctx, "b/0", []byte(val)); err != nil {
		t.Fatal(err)
	}
	cached(t, p, cl, "b/0", val)
	for i := 1; i < 60; i++ {
		k := "b/" + strconv.Itoa(i)
		if _, err := cl.Put(ctx, k, []byte(val)); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second read may store what the first could not
			if got, err := getSer(ctx, cl, k); err != nil || got != val {
				t.Fatalf("get %s: %v", k, err)
			}
		}
		if n := p.ReadCacheBytes(); n > bound {
			t.Fatalf("the cache holds %d bytes, bound %d", n, bound)
		}
	}
	if n := metric(t, p, "dkv_proxy_read_cache_bytes"); n <= bound/2 || n > bound {
		t.Errorf("dkv_proxy_read_cache_bytes %v after 60 reads of 500 bytes, want near the bound %d", n, bound)
	}
	m := metric(t, p, misses)
	if _, err := getSer(ctx, cl, "b/0"); err != nil {
		t.Fatal(err)
	}
	if metric(t, p, misses) != m+1 {
		t.Error("the oldest entry was still cached after 59 newer ones filled the bound")
	}
}

// TestReadCacheUpstreamFailure: when the member holding the cache's
// watch fails, the cache is emptied, and a read is not answered from it
// while no watch keeps it current.
func TestReadCacheUpstreamFailure(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	cl := dial(t, p, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if _, err := cl.Put(ctx, "u", []byte("1")); err != nil {
		t.Fatal(err)
	}
	cached(t, p, cl, "u", "1")
	nd.Stop()
	testutil.Eventually(t, waitLong, "the cache emptied when its watch failed", func() bool {
		return p.ReadCacheBytes() == 0
	})
	h := metric(t, p, hits)
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if got, err := getSer(short, cl, "u"); err == nil {
		t.Errorf("a serializable read with the only member down: %q, want an error, not a cached answer", got)
	}
	if metric(t, p, hits) != h {
		t.Error("a read was answered from the cache while its watch was down")
	}
}

// TestReadCacheRangeWatches: a user who may read only some prefixes,
// whose keyspace watch the cluster refuses, still gets cache hits: the
// proxy watches each cached range alone. She never sees through the
// cache what she may not read; a write straight to the member reaches
// her; her own writes read back at once; a range's watch goes with its
// last entry; and an identity holds a bounded number of them.
func TestReadCacheRangeWatches(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	withAlice(t, nd, func(ctx context.Context, c *client.Client) {
		_, err := c.Put(ctx, "app/bob/secret", []byte("s"))
		must("put app/bob/secret", err)
		_, err = c.Put(ctx, "app/alice/x", []byte("a"))
		must("put app/alice/x", err)
	})
	p := startProxy(t, "", nd)
	root, alice := dial(t, p, "root", "pw"), dial(t, p, "alice", "pw")
	// Root at the member: writes that do not pass through the proxy.
	direct, err := client.New(ctx, client.Config{Endpoints: []string{nd.Srv.ClientAddr()}, AutoSyncInterval: -1, Username: "root", Password: "pw"})
	must("root at the member", err)
	defer direct.Close()
	const watches = "dkv_proxy_read_cache_range_watches"

	cached(t, p, alice, "app/alice/x", "a")
	if n := metric(t, p, watches); n != 1 {
		t.Errorf("%s %v with one range cached, want 1", watches, n)
	}

	// Nothing she may not read, cached for root or not.
	cached(t, p, root, "app/bob/secret", "s")
	for range 3 {
		if got, err := getSer(ctx, alice, "app/bob/secret"); !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("alice's serializable read of app/bob/secret: %q %v, want ErrPermissionDenied", got, err)
		}
		if r, err := alice.List(ctx, "app/", client.WithSerializable()); !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("alice's serializable read of app/: %v %v, want ErrPermissionDenied", r, err)
		}
	}

	// A write that does not pass through the proxy drops her entry, and
	// its watch with it.
	_, err = direct.Put(ctx, "app/alice/x", []byte("b"))
	must("direct put", err)
	testutil.Eventually(t, waitLong, "the range watch gone with its entry", func() bool {
		return metric(t, p, watches) == 0
	})
	cached(t, p, alice, "app/alice/x", "b")

	// Her own writes read back at once, cached or not.
	for i := range 50 {
		v := "w" + strconv.Itoa(i)
		_, err := alice.Put(ctx, "app/alice/x", []byte(v))
		must("alice puts", err)
		for range 2 {
			if got, err := getSer(ctx, alice, "app/alice/x"); err != nil || got != v {
				t.Fatalf("alice's serializable read after her write of %q: %q %v", v, got, err)
			}
		}
	}

	// A prefix she may read is cached too, and holds only her keys.
	_, err = direct.Put(ctx, "app/alice/y", []byte("y"))
	must("direct put", err)
	prefix := func() string {
		r, err := alice.List(ctx, "app/alice/", client.WithSerializable())
		must("alice reads app/alice/", err)
		var ks []string
		for _, kv := range r.KVs {
			ks = append(ks, kv.Key)
		}
		return strings.Join(ks, " ")
	}
	testutil.Eventually(t, waitLong, "app/alice/ answered from the cache", func() bool {
		before := metric(t, p, hits)
		if got := prefix(); got != "app/alice/x app/alice/y" {
			t.Fatalf("alice's app/alice/: %s", got)
		}
		return metric(t, p, hits) > before
	})

	// Many ranges: never more watches than the bound.
	for i := range 300 {
		k := "app/alice/k" + strconv.Itoa(i)
		for range 2 {
			if _, err := alice.Get(ctx, k, client.WithSerializable()); err != nil && !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("get %s: %v", k, err)
			}
		}
	}
	if n := metric(t, p, watches); n > 256 || n < 100 {
		t.Errorf("%s %v after 300 ranges read, want at most the bound 256 (and many)", watches, n)
	}
}
