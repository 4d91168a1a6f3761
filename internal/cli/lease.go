package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *App) leaseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Grant, keep alive, inspect and revoke leases",
		Long: `Leases expire unless kept alive; keys attached to a lease (dkv put --lease ID)
are deleted when it expires or is revoked. TTLs are durations such as 10s or
1m30s, from 1s to 1 year. A lease that does not exist exits with 9.`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Usagef("lease needs a subcommand: grant, keepalive, revoke, ttl, list")
		},
	}
	cmd.AddCommand(a.leaseGrantCmd(), a.leaseKeepAliveCmd(), a.leaseRevokeCmd(), a.leaseTTLCmd(), a.leaseListCmd())
	return cmd
}

// The TTLs the CLI takes are leases' (the lock's, the session's, the
// key's): 1s to 1 year, as the server checks (lease.MinTTLMs, MaxTTLMs).
const (
	minTTL = time.Second
	maxTTL = 365 * 24 * time.Hour
)

// parseTTL parses what (the flag or argument the user typed, for the
// message) as a TTL: a duration, or a bare number of seconds as in
// etcdctl, from 1s to 1 year. 0 is refused like any other value out of
// range: a key without a TTL is a put without --ttl.
func parseTTL(what, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		// A bare number is seconds, as in etcdctl.
		n, nerr := strconv.ParseInt(s, 10, 64)
		if nerr != nil {
			return 0, Usagef("%s %q is not a duration (e.g. 10s, 2m)", what, s)
		}
		if n < 0 || n > int64(maxTTL/time.Second) {
			return 0, Usagef("%s %s: a TTL must be from 1s to 8760h (1 year)", what, s)
		}
		d = time.Duration(n) * time.Second
	}
	if d < minTTL || d > maxTTL {
		return 0, Usagef("%s %s: a TTL must be from 1s to 8760h (1 year)", what, s)
	}
	return d, nil
}

func parseLeaseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, Usagef("lease ID %q is not a positive integer", s)
	}
	return id, nil
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func (a *App) leaseGrantCmd() *cobra.Command {
	var id int64
	cmd := &cobra.Command{
		Use:   "grant TTL",
		Short: "Grant a lease; prints its ID",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ttl, err := parseTTL("TTL", argv[0])
			if err != nil {
				return err
			}
			var opts []client.LeaseOption
			if id != 0 {
				opts = append(opts, client.WithLeaseID(id))
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				g, err := c.Grant(ctx, ttl, opts...)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]int64{"id": g.ID, "ttl_ms": ms(g.TTL)})
				}
				// The bare id, so that ID=$(dkv lease grant 10s) works.
				_, err = fmt.Fprintln(a.stdout, g.ID)
				return err
			})
		},
	}
	cmd.Flags().Int64Var(&id, "id", 0, "use this lease ID instead of a server-picked one")
	return cmd
}

func (a *App) leaseKeepAliveCmd() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "keepalive ID",
		Short: "Keep a lease alive until interrupted (or once, with --once)",
		Long: `Renews the lease about every TTL/3 and prints one line per renewal
with the time and the TTL the lease has left after it
("lease 7 renewed at 10:04:05, remaining 10s"), until interrupted (Ctrl-C)
or the lease is gone (exit 9). --timeout bounds each renewal, not the whole
command.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			id, err := parseLeaseID(argv[0])
			if err != nil {
				return err
			}
			if once {
				return a.run(func(ctx context.Context, c *client.Client) error {
					ttl, err := c.KeepAliveOnce(ctx, id)
					if err != nil {
						return err
					}
					return a.printKeepAlive(id, ttl)
				})
			}
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := a.connect(sig)
			if err != nil {
				return err
			}
			defer c.Close()
			for {
				ctx, cancel := context.WithTimeout(sig, a.timeout)
				ttl, err := c.KeepAliveOnce(ctx, id)
				cancel()
				if sig.Err() != nil {
					return nil
				}
				if err != nil {
					return err
				}
				if err := a.printKeepAlive(id, ttl); err != nil {
					return err
				}
				select {
				case <-sig.Done():
					return nil
				case <-time.After(max(ttl/3, 100*time.Millisecond)):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "renew once and exit")
	return cmd
}

func (a *App) printKeepAlive(id int64, ttl time.Duration) error {
	if a.JSON() {
		return WriteJSON(a.stdout, map[string]int64{"id": id, "ttl_ms": ms(ttl)})
	}
	_, err := fmt.Fprintf(a.stdout, "lease %d renewed at %s, remaining %v\n", id, time.Now().Format(time.TimeOnly), ttl)
	return err
}

// connect opens a client for a command that outlives --timeout.
func (a *App) connect(ctx context.Context) (*client.Client, error) {
	return a.newClient(ctx, a.discover)
}

func (a *App) leaseRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a lease, deleting its keys",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			id, err := parseLeaseID(argv[0])
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.Revoke(ctx, id); err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]int64{"id": id})
				}
				fmt.Fprintf(a.stdout, "lease %d revoked\n", id)
				return nil
			})
		},
	}
}

type jsonLeaseTTL struct {
	ID           int64    `json:"id"`
	GrantedTTLMs int64    `json:"granted_ttl_ms"`
	RemainingMs  int64    `json:"remaining_ms"`
	Keys         []string `json:"keys,omitempty"`
}

func (a *App) leaseTTLCmd() *cobra.Command {
	var keys bool
	cmd := &cobra.Command{
		Use:   "ttl ID",
		Short: "Show a lease's granted and remaining TTL (and its keys, with --keys)",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			id, err := parseLeaseID(argv[0])
			if err != nil {
				return err
			}
			var opts []client.LeaseOption
			if keys {
				opts = append(opts, client.WithAttachedKeys())
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				info, err := c.TimeToLive(ctx, id, opts...)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, jsonLeaseTTL{ID: info.ID, GrantedTTLMs: ms(info.GrantedTTL), RemainingMs: ms(info.Remaining), Keys: info.Keys})
				}
				fmt.Fprintf(a.stdout, "lease %d granted with TTL %v, remaining %v\n", info.ID, info.GrantedTTL, info.Remaining.Round(time.Millisecond))
				if keys {
					for _, k := range info.Keys {
						fmt.Fprintln(a.stdout, k)
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&keys, "keys", false, "also list the attached keys")
	return cmd
}

func (a *App) leaseListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List leases",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				ls, err := c.Leases(ctx)
				if err != nil {
					return err
				}
				rem, err := remainingTTLs(ctx, c, ls)
				if err != nil {
					return err
				}
				if a.JSON() {
					out := make([]map[string]int64, 0, len(ls))
					for i, l := range ls {
						if rem[i] < 0 {
							continue // gone since it was listed
						}
						out = append(out, map[string]int64{"id": l.ID, "granted_ttl_ms": ms(l.GrantedTTL), "remaining_ms": ms(rem[i])})
					}
					return WriteJSON(a.stdout, map[string]any{"leases": out})
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tGRANTED TTL\tREMAINING")
				for i, l := range ls {
					if rem[i] < 0 {
						continue
					}
					fmt.Fprintf(tw, "%d\t%v\t%v\n", l.ID, l.GrantedTTL, rem[i].Round(100*time.Millisecond))
				}
				return tw.Flush()
			})
		},
	}
}

// remainingTTLs asks for each listed lease's remaining TTL, a few at a
// time; -1 marks a lease that expired or was revoked since the listing.
func remainingTTLs(ctx context.Context, c *client.Client, ls []client.LeaseStatus) ([]time.Duration, error) {
	rem := make([]time.Duration, len(ls))
	errs := make([]error, len(ls))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			info, err := c.TimeToLive(ctx, l.ID)
			switch {
			case errors.Is(err, client.ErrLeaseNotFound):
				rem[i] = -1
			case err != nil:
				errs[i] = err
			default:
				rem[i] = info.Remaining
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rem, nil
}
