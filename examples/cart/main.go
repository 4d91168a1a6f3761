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
	"log"
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
	instance = flag.String("instance", "", "run one shop instance named `NAME`, serving HTTP at --listen, its carts in the cluster at --endpoints")
	asProxy  = flag.Bool("proxy", false, "run the round-robin reverse proxy at --listen in front of --backends")
	listen   = flag.String("listen", "", "with --instance or --proxy: the `host:port` to serve HTTP at")
	backends = flag.String("backends", "", "with --proxy: the instances' comma-separated `host:port`s")
	prefix   = flag.String("prefix", "examples/cart/", "with --instance: the key `prefix` the carts live under (sessions at PREFIXsession/); instances sharing carts share it")
)

func main() {
	exenv.ParseFlags()
	switch {
	case *asProxy:
		if *instance != "" {
			fail(errors.New("--proxy and --instance are different processes; give one"))
		}
		if *listen == "" || *backends == "" {
			fail(errors.New("--proxy needs --listen and --backends"))
		}
		fail(serveProxy(*listen, strings.Split(*backends, ",")))
		return
	case *instance != "":
		if *listen == "" {
			fail(errors.New("--instance needs --listen"))
		}
		if *backends != "" {
			fail(errors.New("--backends goes with --proxy, not --instance"))
		}
		// An embedded store would be this process's alone, so instances
		// would not share carts: that is not what an instance is for.
		if flag.Lookup("endpoints").Value.String() == "" {
			fail(errors.New("--instance needs --endpoints (or DKV_ENDPOINTS): instances share carts through a cluster"))
		}
		exenv.Main(func(ctx context.Context, env *exenv.Env) error {
			return serveInstance(ctx, env, *instance, *listen, *prefix)
		})
		return
	case *listen != "" || *backends != "":
		fail(errors.New("--listen and --backends go with --instance or --proxy"))
	}
	exenv.Main(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix: "examples/cart/" + env.Run + "/", ConcurrentAdds: 100,
			Log: exenv.NewLog(os.Stdout), DKVFlags: dkvFlags(),
		})
		return err
	})
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

// procLog logs one line with the process's role, name and pid, so that
// the lines of several processes in one terminal or file tell apart.
func procLog(role string) func(string, ...any) {
	l := log.New(os.Stdout, fmt.Sprintf("%s (pid %d): ", role, os.Getpid()), log.Ltime|log.Lmicroseconds|log.Lmsgprefix)
	return func(format string, args ...any) { l.Printf(format, args...) }
}

// serveInstance serves the shop as instance name at addr until ctx ends
// (SIGTERM or Ctrl-C), then lets the requests in flight finish.
func serveInstance(ctx context.Context, env *exenv.Env, name, addr, prefix string) error {
	logf := procLog("instance " + name)
	c, err := env.NewClient(ctx)
	if err != nil {
		return err
	}
	s, err := startShop(name, prefix+"session/", addr, c, logf)
	if err != nil {
		c.Close()
		return err
	}
	logf("serving the shop at http://%s/ (carts under %ssession/)", s.addr, prefix)
	<-ctx.Done()
	logf("stopping: finishing the requests in flight")
	s.stop()
	logf("stopped")
	return nil
}

// serveProxy serves the round-robin proxy at addr until SIGTERM or
// Ctrl-C.
func serveProxy(addr string, backends []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := procLog("proxy")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p := newProxy(logf, backends...)
	srv := &http.Server{Handler: p.handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	logf("serving at http://%s/, round-robin over %s", ln.Addr(), strings.Join(backends, ", "))
	<-ctx.Done()
	logf("stopping: finishing the requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	logf("stopped")
	return nil
}
