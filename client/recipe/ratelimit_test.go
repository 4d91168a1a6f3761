package recipe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/server/embed"
)

func syncTestNode(t testing.TB) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func syncTestCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// slowRate refills one token an hour: within a test the bucket holds what
// its burst says, so outcomes do not depend on timing.
var slowRate = client.RateLimit{Limit: 1, Period: time.Hour, Burst: 3}

func TestLimiterAllow(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	a, err := recipe.NewLimiter(c, "api", slowRate)
	if err != nil {
		t.Fatal(err)
	}
	// A second limiter on the same key shares the bucket.
	b, _ := recipe.NewLimiter(c, "api", slowRate)
	var got []bool
	for _, l := range []*recipe.Limiter{a, b, a, b} {
		ok, err := l.Allow(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ok)
	}
	if !slices.Equal(got, []bool{true, true, true, false}) {
		t.Fatalf("allowed %v, want three then a refusal", got)
	}
	d, err := a.Decide(ctx, 1)
	if err != nil || d.Allowed || d.Remaining != 0 || d.Limit != 3 || d.RetryAfter <= 50*time.Minute || d.RetryAfter > time.Hour {
		t.Fatalf("refusal %+v %v: want 0 remaining and a retry within the hour", d, err)
	}
	// Another key is another bucket.
	other, _ := recipe.NewLimiter(c, "api-2", slowRate)
	if ok, err := other.AllowN(ctx, 3); err != nil || !ok {
		t.Fatalf("a fresh bucket refused its burst: %v %v", ok, err)
	}
}

func TestLimiterInvalidInput(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	for _, tc := range []struct {
		rate client.RateLimit
		want string
	}{
		{client.RateLimit{Limit: 0, Period: time.Second, Burst: 20}, "limit is 0"},
		{client.RateLimit{Limit: 100, Period: time.Second, Burst: -1}, "burst is -1"},
		{client.RateLimit{Limit: 100, Period: 0, Burst: 20}, "period is 0s"},
	} {
		if _, err := recipe.NewLimiter(c, "k", tc.rate); !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewLimiter(%+v): %v, want ErrInvalidInput naming %q", tc.rate, err, tc.want)
		}
	}
	// The server refuses the same, and n over the burst, naming the limit.
	_, err := c.RateLimitAllow(ctx, "k", client.RateLimit{Limit: 100, Period: time.Second, Burst: 20}, 21)
	if !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), "n is 21: it must be 1 to the burst, 20") {
		t.Fatalf("n > burst: %v", err)
	}
	_, err = c.RateLimitAllow(ctx, "k", client.RateLimit{Limit: 0, Period: time.Second, Burst: 20}, 1)
	if !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), "limit is 0") {
		t.Fatalf("rate 0 at the server: %v", err)
	}
}

func TestLimiterReserveAndWait(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	l, _ := recipe.NewLimiter(c, "res", client.RateLimit{Limit: 1, Period: time.Hour, Burst: 1})
	if err := l.Wait(ctx); err != nil {
		t.Fatalf("wait on a full bucket: %v", err)
	}
	// The next token is an hour away: a reservation within a minute fails,
	// one within two hours succeeds with a delay of about an hour.
	r, err := l.Reserve(ctx, time.Minute)
	if err != nil || r.OK() {
		t.Fatalf("reserve within a minute: %+v %v", r, err)
	}
	r, err = l.Reserve(ctx, 2*time.Hour)
	if err != nil || !r.OK() || r.Delay() < 50*time.Minute || r.Delay() > time.Hour+time.Second {
		t.Fatalf("reserve within two hours: ok=%v delay=%v %v", r.OK(), r.Delay(), err)
	}
	// Wait with a deadline shorter than the wait fails at once.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := l.Wait(wctx); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("wait past the deadline: %v", err)
	}
}

func TestRateLimitMiddleware(t *testing.T) {
	c := syncTestNode(t)
	rate := client.RateLimit{Limit: 1, Period: time.Hour, Burst: 2}
	h := recipe.RateLimitMiddleware(c, rate, func(r *http.Request) string { return "user:" + r.Header.Get("X-User") })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(user string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i, want := range []struct {
		code      int
		remaining string
	}{{200, "1"}, {200, "0"}, {429, "0"}} {
		resp := get("ann")
		if resp.StatusCode != want.code || resp.Header.Get("X-RateLimit-Remaining") != want.remaining || resp.Header.Get("X-RateLimit-Limit") != "2" {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, resp.Header)
		}
		reset, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Reset"))
		if reset < 3000 || reset > 7200 {
			t.Fatalf("request %d: X-RateLimit-Reset %q, want the seconds until full (1-2 h)", i, resp.Header.Get("X-RateLimit-Reset"))
		}
		if want.code == 429 {
			if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 3000 || ra > 3600 {
				t.Fatalf("Retry-After %q, want about an hour", resp.Header.Get("Retry-After"))
			}
		}
	}
	if resp := get("bob"); resp.StatusCode != 200 {
		t.Fatalf("another key shares ann's bucket: %d", resp.StatusCode)
	}
}

// TestLocalBatchOvershootBound drives P limiters in local mode and checks
// the bound docs/recipes.md states: over any window W of use times, at
// most burst + W/T + P*batch tokens were used.
func TestLocalBatchOvershootBound(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	const P, batch = 3, 5
	rate := client.RateLimit{Limit: 200, Period: time.Second, Burst: 10} // T = 5 ms
	var (
		mu   sync.Mutex
		uses []time.Time
		wg   sync.WaitGroup
	)
	stop := time.Now().Add(400 * time.Millisecond)
	for range P {
		l, err := recipe.NewLimiter(c, "local", rate, recipe.WithLocalBatch(batch))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				ok, err := l.Allow(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					uses = append(uses, time.Now())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(uses, func(a, b time.Time) int { return a.Compare(b) })
	if len(uses) < 20 {
		t.Fatalf("only %d tokens used: the test exercised little", len(uses))
	}
	T := rate.Period / time.Duration(rate.Limit)
	for _, w := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
		lo := 0
		for hi := range uses {
			for uses[hi].Sub(uses[lo]) > w {
				lo++
			}
			if got, bound := int64(hi-lo+1), rate.Burst+int64(w/T)+P*batch; got > bound {
				t.Fatalf("window %v: %d tokens used, bound %d", w, got, bound)
			}
		}
	}
}
