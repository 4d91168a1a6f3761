package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

const exitCodeHelp = `Exit codes:
  0  OK
  1  other error
  2  usage error (bad command, flag or argument)
  3  NotFound (get of a missing key)
  4  Conflict (a condition such as --if-absent or --if-version failed)
  5  Locked
  6  InvalidInput (rejected by the store, e.g. oversized key or value)
  7  Unavailable (no reachable endpoint, no leader, timeout, or a write
     whose outcome is unknown)
  8  Compacted (the revision was compacted away)
  9  LeaseNotFound
 10  NoSpace (a member's disk is nearly full or the database is over
     --quota-bytes; reads, deletes and compaction still work)
 11  DataDamaged (dkv serve: the data dir's durable data is damaged or
     lost; see docs/cluster.md, "Damaged data")
 12  PermissionDenied (auth is enabled and the user's roles do not allow
     the call; the message names the permission and keys missing)
 13  Unauthenticated (auth is enabled and no valid token: no --user, a
     wrong password, or an expired token)
 14  NoIndex (dkv query: no index serves the query; the message names
     the one to create, or use --scan)
 15  Throttled (too many failed logins for the user from this address,
     or from this address; the message names the wait)`

// Main runs the dkv command, with the server-side commands of s, with the
// process's arguments and exits.
func Main(s Server) {
	os.Exit(s.Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Server is the half of dkv that opens a data dir or runs a node: the
// etcdutl side, package servercmd. cmd/dkv hands it to Main instead of
// this package importing it, so that the client commands link no server,
// Pebble or raft (TestLayering in docs/architecture_test.go).
type Server struct {
	// Version is the server's version (server.Version); a build from a
	// checkout, with neither an -ldflags version nor a module version,
	// reports it with "-dev".
	Version string
	// AddCommands adds the server-side commands to root. It runs after
	// the client commands are added, so it may add subcommands to them
	// (snapshot restore).
	AddCommands func(a *App, root *cobra.Command)
}

// App holds the global flags and the I/O streams every command uses.
type App struct {
	endpoints string
	store     string
	discover  bool
	timeout   time.Duration
	output    string
	tls       tlsFlags
	user      string     // --user NAME[:PASSWORD]
	creds     *[2]string // credentials' answer, once asked (a prompt is not repeated)

	stdin          io.Reader
	stdout, stderr io.Writer
}

// Run runs dkv with only the client commands with args and returns its
// exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return Server{}.Run(args, stdin, stdout, stderr)
}

// Run runs dkv, with the server-side commands of s, with args and
// returns its exit code.
func (s Server) Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &App{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd(s)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	if code, ok := childExitCode(err); ok {
		return code // dkv lock KEY -- COMMAND: COMMAND's own exit code
	}
	if isUsage(err) {
		fmt.Fprintf(stderr, "Error: usage: %v\nRun '%s --help' for usage.\n", err, cmd.CommandPath())
		return exitUsage
	}
	fmt.Fprintln(stderr, errorLine(err))
	return exitCode(err)
}

func (a *App) rootCmd(s Server) *cobra.Command {
	root := &cobra.Command{
		Use:   "dkv",
		Short: "DKV: a replicated key-value and coordination store",
		Long: `dkv runs a DKV node (dkv serve) and talks to a DKV cluster.

Client commands connect to --endpoints (env DKV_ENDPOINTS, comma separated)
and talk only to them (--discover adds the other members' addresses, for
long-running commands), and give up after --timeout. --cacert (env
DKV_CACERT) connects with TLS, --cert and --key add a client certificate. Output is text for scripts and humans, or one
JSON object per command with -o json.

` + exitCodeHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if a.output != "text" && a.output != "json" {
				return Usagef("-o must be text or json, not %q", a.output)
			}
			if a.timeout <= 0 {
				return Usagef("--timeout must be positive")
			}
			return a.tls.load()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	defEndpoints := os.Getenv("DKV_ENDPOINTS")
	if defEndpoints == "" {
		defEndpoints = "127.0.0.1:7861"
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.endpoints, "endpoints", defEndpoints, "comma-separated gRPC endpoints, host:port or http://host:port (env DKV_ENDPOINTS)")
	pf.StringVar(&a.store, "store", os.Getenv("DKV_STORE"), "the named store the command works in; empty is the default store (env DKV_STORE; see dkv store)")
	pf.BoolVar(&a.discover, "discover", false, "also use every member's client address from the member list, learnt in the background (never for per-member commands)")
	pf.DurationVar(&a.timeout, "timeout", 5*time.Second, "time limit for the command, including connecting")
	pf.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	a.tls.register(pf)
	pf.StringVar(&a.user, "user", "", "authenticate as NAME[:PASSWORD] when the cluster has auth enabled (env DKV_USER, DKV_PASSWORD; prompts for a missing password on a terminal)")
	root.AddCommand(
		a.putCmd(),
		a.getCmd(),
		a.delCmd(),
		a.txnCmd(),
		a.counterCmd(),
		a.ratelimitCmd(),
		a.semaphoreCmd(),
		a.barrierCmd(),
		a.rwlockCmd(),
		a.compactCmd(),
		a.statusCmd(),
		a.memberCmd(),
		a.watchCmd(),
		a.indexCmd(),
		a.queryCmd(),
		a.leaseCmd(),
		a.lockCmd(),
		a.electCmd(),
		a.presenceCmd(),
		a.leaderCmd(),
		a.storeCmd(),
		a.benchCmd(),
		a.endpointCmd(),
		a.userCmd(),
		a.roleCmd(),
		a.authCmd(),
		a.queueCmd(),
		a.flagCmd(),
		a.snapshotCmd(),
		a.alarmCmd(),
		a.defragCmd(),
		a.proxyCmd(),
	)
	if s.AddCommands != nil {
		s.AddCommands(a, root)
	}
	a.addVersion(root, s.Version)
	return root
}

// run connects, runs fn within --timeout and closes the client.
func (a *App) run(fn func(ctx context.Context, c *client.Client) error) error {
	return a.runWith(a.discover, fn)
}

// runMember is run for a command about one member (status, a
// serializable read): it talks only to the endpoints named, never to
// discovered ones, so `--endpoints X` answers from X.
func (a *App) runMember(fn func(ctx context.Context, c *client.Client) error) error {
	return a.runWith(false, fn)
}

func (a *App) runWith(discover bool, fn func(ctx context.Context, c *client.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	c, err := a.newClient(ctx, discover)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// newClient connects to --endpoints, waiting up to --timeout for a first
// connection and failing at once when none can be reached. With discover
// it also learns the other members in the background.
func (a *App) newClient(ctx context.Context, discover bool) (*client.Client, error) {
	eps, err := a.endpointList()
	if err != nil {
		return nil, err
	}
	sync := time.Duration(-1)
	if discover {
		sync = 0 // the client's default interval
	}
	user, pw, err := a.credentials()
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: a.timeout, FailFast: true, AutoSyncInterval: sync, TLS: a.tls.cfg, Username: user, Password: pw, Store: a.store})
	return c, a.tlsHint(err)
}

// tlsHint adds a hint to the error of a plaintext connection to a TLS
// port, which gRPC reports only as a failed HTTP/2 preface, and names the
// flags when the client found the cluster wants a certificate.
func (a *App) tlsHint(err error) error {
	var ce *client.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	switch {
	case a.tls.cfg == nil && strings.Contains(ce.Msg, "server preface"):
		ce.Msg += " (does the cluster use TLS? connect with --cacert, and --cert/--key if it wants a client certificate)"
	case a.tls.cfg != nil && strings.Contains(ce.Msg, "requires a client certificate"):
		ce.Msg = "this cluster requires a client certificate (--cert/--key)"
	}
	return err
}

// endpointList parses --endpoints; a malformed one is a usage error.
func (a *App) endpointList() ([]string, error) {
	var eps []string
	for _, e := range strings.Split(a.endpoints, ",") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		ep, err := client.ParseEndpoint(e)
		if err != nil {
			var ce *client.Error
			if errors.As(err, &ce) {
				return nil, Usagef("--endpoints: %s", ce.Msg)
			}
			return nil, Usagef("--endpoints: %v", err)
		}
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, Usagef("--endpoints is empty")
	}
	return eps, nil
}

// JSON says whether -o json asked for JSON output.
func (a *App) JSON() bool { return a.output == "json" }

// Stdin, Stdout and Stderr are the streams dkv was run with.
func (a *App) Stdin() io.Reader  { return a.stdin }
func (a *App) Stdout() io.Writer { return a.stdout }
func (a *App) Stderr() io.Writer { return a.stderr }

// Args wraps a cobra argument validator so its errors are usage errors.
func Args(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := v(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}
