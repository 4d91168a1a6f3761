package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// serve is one instance of the API as a process of its own (--instance):
// it serves on listen until SIGTERM, then finishes the requests in
// flight. Every second with traffic it prints how many requests it let
// through and refused. It holds nothing in memory about the limit: the
// bucket is in the store, so a restarted instance does not start with a
// full bucket of its own.
func serve(ctx context.Context, in *exenv.Instance, listen string, o options) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var allowed, refused atomic.Int64
	api := handler(in.Name, in.Client, o)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		api.ServeHTTP(sw, r)
		switch sw.status {
		case http.StatusOK:
			allowed.Add(1)
		case http.StatusTooManyRequests:
			refused.Add(1)
		}
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	in.Emit("listening", "url", "http://"+ln.Addr().String(), "limit", o.rate.Limit, "burst", o.rate.Burst)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-served:
			return err
		case <-tick.C:
			if a, r := allowed.Swap(0), refused.Swap(0); a+r > 0 {
				in.Emit("served", "allowed", a, "refused", r)
			}
		case <-ctx.Done():
			cctx, cancel := exenv.CleanupContext()
			defer cancel()
			if err := srv.Shutdown(cctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// callInstances is the callers as a process of their own (--instance
// NAME --call URLS): they send requests round-robin to the instances at
// urls for the window, print one "called" event with what they got and
// the bound the shared limit sets, and exit.
func callInstances(ctx context.Context, in *exenv.Instance, urls string, o options) error {
	list := strings.Split(urls, ",")
	in.Emit("calling", "instances", len(list), "callers", o.callers, "window", o.window)
	res := callers(ctx, list, o)
	allowed, refused := res.total()
	var by []string
	for i, u := range list {
		by = append(by, fmt.Sprintf("%s:%d/%d", strings.TrimPrefix(u, "http://"), res.allowed[i], res.refused[i]))
	}
	verdict := "held"
	if float64(allowed) > res.bound {
		verdict = "EXCEEDED"
	}
	in.Emit("called", "allowed", allowed, "refused", refused, "other", res.other, "bad_refusals", res.refusedBadly,
		"elapsed", res.elapsed.Round(time.Millisecond), "bound", fmt.Sprintf("%.1f", res.bound), "limit", verdict,
		"by_instance", strings.Join(by, ","))
	return nil
}
