// Command ratelimit-api runs three instances of a small HTTP API that
// share one rate limit per API key, kept in DKV: however the requests
// spread over the instances, the key gets at most its limit, and a
// refused request gets 429 Too Many Requests with Retry-After.
//
// Each instance wraps its handler in recipe.RateLimitMiddleware; the
// bucket for an API key lives in the store (one raft command per
// decision), so every instance decides against the same bucket.
//
// With no --instance it plays the whole scenario in one process: callers
// send requests round-robin across the three for --window, then a polite
// caller shows Retry-After: it waits as told and is let through. With
// --instance NAME the process is one instance of the API (see
// instance.go), serving on --listen until SIGTERM; with --instance NAME
// --call URL,URL,... it is the callers instead, against instances
// running as processes (go run ./examples/run ratelimit-api does it for
// you).
//
//	go run ./examples/ratelimit-api
//	go run ./examples/ratelimit-api --endpoints 127.0.0.1:17861,127.0.0.1:17871,127.0.0.1:17881
//	go run ./examples/ratelimit-api --endpoints ... --instance A --listen 127.0.0.1:8081
//	go run ./examples/ratelimit-api --endpoints ... --instance caller --call http://127.0.0.1:8081,...
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	o := options{rate: client.RateLimit{Period: time.Second}, maxRequests: 20000}
	flag.Int64Var(&o.rate.Limit, "limit", 10, "requests per second for one API key, across all instances")
	flag.Int64Var(&o.rate.Burst, "burst", 5, "requests a key may make at once after a quiet spell")
	flag.DurationVar(&o.window, "window", 3*time.Second, "how long the callers send requests")
	flag.IntVar(&o.callers, "callers", 6, "concurrent callers")
	listen := flag.String("listen", "127.0.0.1:0", "with --instance: the address to serve the API on")
	call := flag.String("call", "", "with --instance: be the callers, sending requests round-robin to these comma-separated instance URLs for --window, instead of serving")
	exenv.MainInstances(func(ctx context.Context, env *exenv.Env) error {
		ctx, cancel := context.WithTimeout(ctx, o.window+time.Minute)
		defer cancel()
		o.bucketPrefix, o.out = "examples/ratelimit-api/"+env.Run+"/", os.Stdout
		_, err := run(ctx, env.Client, o)
		return err
	}, func(ctx context.Context, in *exenv.Instance) error {
		o.bucketPrefix = "examples/ratelimit-api/" + in.Run + "/"
		if *call != "" {
			return callInstances(ctx, in, *call, o)
		}
		return serve(ctx, in, *listen, o)
	})
}

type options struct {
	rate         client.RateLimit
	window       time.Duration // the callers stop after this long...
	maxRequests  int           // ...or after this many requests
	callers      int
	bucketPrefix string
	out          io.Writer
}

// result is what the callers saw.
type result struct {
	allowed, refused []int // by instance
	// refusedBadly counts refusals without 429 or a Retry-After of at
	// least one second; other counts any other answer (503, errors).
	refusedBadly, other int
	elapsed             time.Duration // first request sent to last answer
	bound               float64       // burst + limit per period × elapsed
	// politeWaited is the Retry-After the polite caller waited;
	// politeStatus the status it then got.
	politeWaited time.Duration
	politeStatus int
}

func (r *result) total() (allowed, refused int) {
	for i := range r.allowed {
		allowed, refused = allowed+r.allowed[i], refused+r.refused[i]
	}
	return allowed, refused
}

// handler is the API, behind the shared limit.
func handler(name string, rl recipe.RateLimitClient, o options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from instance %s\n", name)
	})
	limit := recipe.RateLimitMiddleware(rl, o.rate, func(r *http.Request) string {
		key := r.Header.Get("X-API-Key")
		if key == "" {
			key = "anonymous"
		}
		return o.bucketPrefix + key
	})
	return limit(mux)
}

// startInstance serves the API on a loopback port until ctx ends.
func startInstance(ctx context.Context, name string, rl recipe.RateLimitClient, o options) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: handler(name, rl, o)}
	go srv.Serve(ln)
	go func() { <-ctx.Done(); srv.Close() }()
	return "http://" + ln.Addr().String(), nil
}

// get sends one request for API key "demo" to the instance at url.
func get(ctx context.Context, hc *http.Client, url string) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/hello", nil)
	req.Header.Set("X-API-Key", "demo")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// callers send requests for one API key round-robin across urls, from
// o.callers goroutines, for o.window or o.maxRequests requests, and
// count the answers by instance.
func callers(ctx context.Context, urls []string, o options) *result {
	hc := &http.Client{Timeout: 10 * time.Second}
	res := &result{allowed: make([]int, len(urls)), refused: make([]int, len(urls))}
	var (
		mu   sync.Mutex
		sent atomic.Int64
		wg   sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(o.window)
	for range o.callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				n := sent.Add(1)
				if n > int64(o.maxRequests) {
					return
				}
				i := int(n % int64(len(urls)))
				status, retryAfter, err := get(ctx, hc, urls[i])
				mu.Lock()
				switch {
				case err == nil && status == http.StatusOK:
					res.allowed[i]++
				case err == nil && status == http.StatusTooManyRequests:
					res.refused[i]++
					if s, err := strconv.Atoi(retryAfter); err != nil || s < 1 {
						res.refusedBadly++
					}
				default:
					res.other++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.bound = float64(o.rate.Burst) + float64(o.rate.Limit)*res.elapsed.Seconds()/o.rate.Period.Seconds()
	return res
}

func run(ctx context.Context, c *client.Client, o options) (*result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	names := []string{"A", "B", "C"}
	var urls []string
	for _, name := range names {
		// In one process the instances share a client; as separate
		// processes (--instance) each has its own. The bucket is in the
		// store either way.
		u, err := startInstance(ctx, name, c, o)
		if err != nil {
			return nil, err
		}
		urls = append(urls, u)
		fmt.Fprintf(o.out, "instance %s serves %s/hello\n", name, u)
	}
	fmt.Fprintf(o.out, "one limit for API key \"demo\" on all three: %d requests per %v, burst %d\n",
		o.rate.Limit, o.rate.Period, o.rate.Burst)
	fmt.Fprintf(o.out, "%d callers send requests round-robin across A, B and C for %v...\n", o.callers, o.window)

	res := callers(ctx, urls, o)
	for i, name := range names {
		fmt.Fprintf(o.out, "  instance %s: %4d allowed, %5d refused with 429\n", name, res.allowed[i], res.refused[i])
	}
	allowed, refused := res.total()
	fmt.Fprintf(o.out, "  together:   %4d allowed, %5d refused, in %.2fs\n", allowed, refused, res.elapsed.Seconds())
	verdict := "held"
	if float64(allowed) > res.bound {
		verdict = "EXCEEDED"
	}
	fmt.Fprintf(o.out, "the limit allows at most burst + rate × time = %d + %d/%v × %.2fs = %.1f: %s\n",
		o.rate.Burst, o.rate.Limit, o.rate.Period, res.elapsed.Seconds(), res.bound, verdict)
	fmt.Fprintf(o.out, "(three instances each limiting on its own would have allowed up to %.0f)\n", 3*res.bound)
	if res.refusedBadly > 0 || res.other > 0 {
		fmt.Fprintf(o.out, "WARNING: %d refusals without a valid Retry-After, %d other answers\n", res.refusedBadly, res.other)
	}

	// A polite caller: on 429 it waits Retry-After seconds, then retries.
	hc := &http.Client{Timeout: 10 * time.Second}
	for range 100 {
		status, retryAfter, err := get(ctx, hc, urls[0])
		if err != nil {
			return nil, err
		}
		if status != http.StatusTooManyRequests {
			continue // spend the bucket until a refusal
		}
		s, _ := strconv.Atoi(retryAfter)
		res.politeWaited = time.Duration(s) * time.Second
		fmt.Fprintf(o.out, "a polite caller got 429 with Retry-After: %s, waited %v", retryAfter, res.politeWaited)
		t := time.NewTimer(res.politeWaited)
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if res.politeStatus, _, err = get(ctx, hc, urls[1]); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.out, " and got %d %s on instance B\n", res.politeStatus, http.StatusText(res.politeStatus))
		break
	}
	return res, nil
}
