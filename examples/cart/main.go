// Command cart is a small web shop whose shopping carts live in DKV
// through the session store recipe: whichever instance answers, the cart
// is the same, an instance replaced or killed loses nothing, and 100
// concurrent adds to one cart across instances lose none.
//
// Without a mode flag it is the narrated demo: two instances and a
// round-robin proxy, all in this process. With --instance NAME it is one
// instance serving the shop over HTTP at --listen; with --proxy it is a
// round-robin reverse proxy at --listen in front of --backends. See
// README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

var (
	instance = flag.String("instance", "", "run one process named `NAME`: a shop instance serving HTTP at --listen, its carts in the cluster at --endpoints; with --proxy, the proxy's name (default proxy); with --shop, a shopper")
	asProxy  = flag.Bool("proxy", false, "run the round-robin reverse proxy at --listen in front of --backends")
	listen   = flag.String("listen", "127.0.0.1:0", "with --instance or --proxy: the `host:port` to serve HTTP at (port 0: a free one, printed)")
	backends = flag.String("backends", "", "with --proxy: the instances' comma-separated `host:port`s")
	prefix   = flag.String("prefix", "examples/cart/", "with --instance: the key `prefix` the carts live under (sessions at PREFIXsession/); instances sharing carts share it")
	run      = flag.String("run", "", "with --instance: the run's `id`; the carts then live under examples/cart/ID/ unless --prefix is given")
	shopURL  = flag.String("shop", "", "with --instance: be a shopper, adding --adds items to one cart through the proxy at this `URL`, then checking the cart")
	session  = flag.String("session", "", "with --shop: the session cookie (sid) of the cart to add to (default: a new cart)")
	nAdds    = flag.Int("adds", 50, "with --shop: how many items to add")
	workers  = flag.Int("workers", 5, "with --shop: adds in flight at once")
	pause    = flag.Duration("pause", 0, "with --shop: each worker's pause between two adds")
)

func main() {
	exenv.ParseFlags()
	name := *instance
	switch {
	case *asProxy:
		if name == "" {
			name = "proxy"
		}
		if *backends == "" {
			fail(errors.New("--proxy needs --backends"))
		}
		fail(serveProxy(exenv.NewEvents(os.Stdout, name, os.Getpid()), *listen, strings.Split(*backends, ",")))
		return
	case *shopURL != "":
		if name == "" {
			fail(errors.New("--shop goes with --instance NAME: the shopper's name, in its items' names"))
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ev := exenv.NewEvents(os.Stdout, name, os.Getpid())
		err := runShopper(ctx, shopperConfig{Name: name, Shop: *shopURL, Session: *session, Adds: *nAdds, Workers: *workers, Pause: *pause}, ev.Emit)
		if err != nil {
			ev.Emit("failed", "err", err)
			os.Exit(1)
		}
		ev.Emit("stopped")
		return
	case name != "":
		if *backends != "" {
			fail(errors.New("--backends goes with --proxy, not --instance"))
		}
		// An embedded store would be this process's alone, so instances
		// would not share carts: that is not what an instance is for.
		if flag.Lookup("endpoints").Value.String() == "" {
			fail(errors.New("--instance needs --endpoints (or DKV_ENDPOINTS): instances share carts through a cluster"))
		}
		p := *prefix
		if *run != "" && !flagSet("prefix") {
			p = "examples/cart/" + *run + "/"
		}
		// Every line it prints is an event line, connecting included.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ev := exenv.NewEvents(os.Stdout, name, os.Getpid())
		conn := exenv.Connection()
		env, err := conn.Open(ctx)
		if err == nil {
			err = serveInstance(ctx, env, ev, name, *listen, p)
			env.Close()
		}
		if err != nil {
			ev.Emit("failed", "err", err)
			os.Exit(1)
		}
		return
	case *backends != "":
		fail(errors.New("--backends goes with --proxy"))
	}
	exenv.Main(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix: "examples/cart/" + env.Run + "/", ConcurrentAdds: 100,
			Log: exenv.NewLog(os.Stdout), DKVFlags: dkvFlags(),
		})
		return err
	})
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// dkvFlags are the dkv CLI's flags to reach the cluster this run used
// (the connection flags have the same names), without a password; empty
// for the embedded store, which is gone once the run ends.
func dkvFlags() string {
	if flag.Lookup("endpoints").Value.String() == "" {
		return ""
	}
	var args []string
	for _, name := range []string{"endpoints", "cacert", "cert", "key", "user"} {
		v := flag.Lookup(name).Value.String()
		if name == "user" {
			v, _, _ = strings.Cut(v, ":")
		}
		if v != "" {
			args = append(args, "--"+name+" "+v)
		}
	}
	return strings.Join(args, " ")
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// serveInstance serves the shop as instance name at addr until ctx ends
// (SIGTERM or Ctrl-C), then lets the requests in flight finish. Each
// request is an event line (exenv.Events), as are its start and stop.
func serveInstance(ctx context.Context, env *exenv.Env, ev *exenv.Events, name, addr, prefix string) error {
	c, err := env.NewClient(ctx)
	if err != nil {
		return err
	}
	s, err := startShop(name, prefix+"session/", addr, c, ev.Emit)
	if err != nil {
		c.Close()
		return err
	}
	ev.Emit("listening", "url", "http://"+s.addr, "carts", prefix+"session/")
	<-ctx.Done()
	ev.Emit("stopping", "why", "finishing the requests in flight")
	s.stop()
	ev.Emit("stopped")
	return nil
}

// serveProxy serves the round-robin proxy at addr until SIGTERM or
// Ctrl-C.
func serveProxy(ev *exenv.Events, addr string, backends []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p := newProxy(ev.Emit, backends...)
	srv := &http.Server{Handler: p.handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	ev.Emit("listening", "url", "http://"+ln.Addr().String(), "backends", strings.Join(backends, ","))
	<-ctx.Done()
	ev.Emit("stopping", "why", "finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	ev.Emit("stopped")
	return nil
}
