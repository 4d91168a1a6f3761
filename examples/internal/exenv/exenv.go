// Package exenv is what every program under examples/ does before its
// scenario: connect to DKV from the command line. Without --endpoints it
// starts an embedded single-node store (server/embed) with its data in
// a temporary directory, removed on Close (or in --keep DIR, kept); with
// --endpoints it dials a cluster, with the same --cacert/--cert/--key/--user
// flags (and DKV_* environment variables) as the dkv CLI.
//
// An example whose instances can also run one per process (MainInstances)
// takes --instance NAME: the process is then that one instance, printing
// an event line (event.go) for each thing it does, which the driver
// examples/run and the process tests read.
package exenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server/embed"
)

// Flags are the connection flags.
type Flags struct {
	Endpoints, CACert, Cert, Key, User string
	// Keep is where the embedded store keeps its data (not removed);
	// empty means a temporary directory, removed on Close.
	Keep string
}

// Register adds --endpoints, --cacert, --cert, --key and --user to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Endpoints, "endpoints", os.Getenv("DKV_ENDPOINTS"), "comma-separated gRPC endpoints of a DKV cluster (env DKV_ENDPOINTS); empty: an embedded store in a temporary directory")
	fs.StringVar(&f.CACert, "cacert", os.Getenv("DKV_CACERT"), "connect with TLS, trusting the CA certificates (PEM) in this file (env DKV_CACERT)")
	fs.StringVar(&f.Cert, "cert", os.Getenv("DKV_CERT"), "client certificate (PEM), with --key (env DKV_CERT)")
	fs.StringVar(&f.Key, "key", os.Getenv("DKV_KEY"), "key (PEM) of --cert (env DKV_KEY)")
	fs.StringVar(&f.User, "user", os.Getenv("DKV_USER"), "authenticate as NAME[:PASSWORD] when the cluster has auth enabled (env DKV_USER; the password may come from DKV_PASSWORD)")
	fs.StringVar(&f.Keep, "keep", "", "without --endpoints: keep the embedded store's data in this directory, to read it afterwards with dkv serve --data-dir DIR (default: a temporary directory, removed at the end)")
}

// Env is an open connection to a store.
type Env struct {
	// Client is the program's client.
	Client *client.Client
	// Where says in words what Client is connected to.
	Where string
	// Run is a short random id; examples put it in their key prefixes so
	// that a second run against the same cluster starts afresh.
	Run string

	// cli is how a dkv command reaches the store after the program has
	// exited: the connection flags for a cluster, the data dir to serve
	// for a kept embedded store; nil when nothing is left to reach.
	cli       *later
	newClient func(context.Context) (*client.Client, error)
	close     func() error
}

type later struct {
	flags   []string // for a cluster: the dkv CLI's connection flags
	dataDir string   // for a kept embedded store
}

// Command is `dkv ARGS` with the flags that reach this store while the
// program runs, or "" if none can: an embedded store has no port.
func (e *Env) Command(args ...string) string {
	if e.cli == nil || e.cli.flags == nil {
		return ""
	}
	return "dkv " + strings.Join(append(append([]string{}, e.cli.flags...), args...), " ")
}

// Afterwards says how to run `dkv ARGS` once the program has exited, to
// do what (a phrase: "read them"): against a cluster, the command with
// its connection flags; for an embedded store kept with --keep, dkv
// serve on its directory first. For an embedded store in a temporary
// directory there is nothing left to run a command against, and it says
// so instead.
func (e *Env) Afterwards(what string, args ...string) string {
	switch {
	case e.cli == nil:
		return "The embedded store and its data are deleted as the program exits (--keep DIR keeps them; --endpoints runs against a cluster)."
	case e.cli.dataDir != "":
		return fmt.Sprintf("The data is kept in %s. To %s, serve it (dkv serve --data-dir %s), then in another terminal: dkv %s",
			e.cli.dataDir, what, e.cli.dataDir, strings.Join(args, " "))
	}
	return fmt.Sprintf("To %s: %s", what, e.Command(args...))
}

// NewClient opens another client to the same store, for scenarios with
// several instances that each have their own connection. Close it.
func (e *Env) NewClient(ctx context.Context) (*client.Client, error) { return e.newClient(ctx) }

// Close closes Client and, for an embedded store, stops it and removes
// its directory (unless it is kept: --keep).
func (e *Env) Close() error { return e.close() }

// Open connects as the flags say.
func (f *Flags) Open(ctx context.Context) (*Env, error) {
	var b [3]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:])
	if f.Endpoints != "" && f.Keep != "" {
		return nil, errors.New("--keep keeps an embedded store's data; with --endpoints the data is the cluster's")
	}
	if f.Endpoints == "" {
		if f.Keep != "" {
			return openEmbedded(ctx, run, f.Keep, true)
		}
		return OpenEmbedded(ctx, run)
	}
	cli := &later{flags: []string{"--endpoints", f.Endpoints}}
	user, _, _ := strings.Cut(f.User, ":") // never print a password
	for _, fl := range [][2]string{{"--cacert", f.CACert}, {"--cert", f.Cert}, {"--key", f.Key}, {"--user", user}} {
		if fl[1] != "" {
			cli.flags = append(cli.flags, fl[0], fl[1])
		}
	}
	cfg := client.Config{Endpoints: strings.Split(f.Endpoints, ",")}
	if f.CACert != "" || f.Cert != "" || f.Key != "" {
		if (f.Cert == "") != (f.Key == "") {
			return nil, errors.New("--cert and --key go together")
		}
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.CACert != "" {
			pem, err := os.ReadFile(f.CACert)
			if err != nil {
				return nil, fmt.Errorf("--cacert: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", f.CACert)
			}
		}
		if f.Cert != "" {
			pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
			if err != nil {
				return nil, fmt.Errorf("--cert/--key: %w", err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		cfg.TLS = tc
	}
	if f.User != "" {
		name, pw, ok := strings.Cut(f.User, ":")
		if !ok {
			pw = os.Getenv("DKV_PASSWORD")
		}
		cfg.Username, cfg.Password = name, pw
	}
	dial := func(ctx context.Context) (*client.Client, error) { return client.New(ctx, cfg) }
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	return &Env{Client: c, Where: "the cluster at " + f.Endpoints, Run: run, cli: cli, newClient: dial, close: c.Close}, nil
}

// OpenEmbedded starts an embedded store in a new temporary directory.
func OpenEmbedded(ctx context.Context, run string) (*Env, error) {
	dir, err := os.MkdirTemp("", "dkv-example-")
	if err != nil {
		return nil, err
	}
	return openEmbedded(ctx, run, dir, false)
}

// openEmbedded starts an embedded store in dir, removed on Close unless
// keep.
func openEmbedded(ctx context.Context, run, dir string, keep bool) (*Env, error) {
	c, err := embed.Open(ctx, dir)
	if err != nil {
		if !keep {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	dial := func(ctx context.Context) (*client.Client, error) {
		conn, err := embed.Server(c).DialInProcess(ctx)
		if err != nil {
			return nil, err
		}
		return client.NewFromConn(conn, nil), nil
	}
	closeAll := func() error {
		err := c.Close()
		if keep {
			return err
		}
		if rerr := os.RemoveAll(dir); err == nil {
			err = rerr
		}
		return err
	}
	env := &Env{Client: c, Where: "an embedded store in " + dir, Run: run, newClient: dial, close: closeAll}
	if keep {
		env.Where += " (kept)"
		env.cli = &later{dataDir: dir}
	}
	return env, nil
}

// flags are the connection flags of Main, registered by ParseFlags.
var flags Flags

// ParseFlags registers the connection flags on the command line and
// parses it. Main calls it; a program calls it first only to check its
// own flags before the store is opened.
func ParseFlags() {
	if flag.Parsed() {
		return
	}
	flags.Register(flag.CommandLine)
	flag.Parse()
}

// Main parses the flags (see ParseFlags), opens the store and runs
// scenario with it, exiting 1 with the error if it fails.
func Main(scenario func(ctx context.Context, env *Env) error) {
	ParseFlags()
	// Ctrl-C ends the scenario, and Close still removes the embedded
	// store's directory.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := flags.Open(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connecting:", err)
		os.Exit(1)
	}
	fmt.Printf("Using %s.\n\n", env.Where)
	err = scenario(ctx, env)
	if cerr := env.Close(); err == nil {
		err = cerr
	}
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "interrupted")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// WaitFor polls cond until it holds, fails or ctx ends.
func WaitFor(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
