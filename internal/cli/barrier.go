package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/spf13/cobra"
)

// barrierCmd is `dkv barrier hold|release|wait NAME` (a barrier) and
// `dkv barrier enter|leave NAME -n N` (a double barrier).
func (a *App) barrierCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "barrier hold|release|wait NAME | barrier enter|leave NAME -n N",
		Short: "Barriers: hold one up, release it, wait for it; or enter and leave a double barrier together",
		Long: `'dkv barrier hold NAME' raises the barrier NAME (exit 4, Conflict, if it is
already up); 'dkv barrier wait NAME' blocks until it is released (at once if
it is not up), woken by a watch; 'dkv barrier release NAME' releases it. See
docs/recipes.md, "Barriers".

'dkv barrier enter NAME -n N' joins the double barrier NAME and returns once
N participants have entered, printing this participant's ID; 'dkv barrier
leave NAME -n N --id ID' removes it and returns once all N have left. See
'dkv barrier enter --help'.`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Usagef("barrier needs a subcommand: hold, release, wait, enter, leave")
		},
	}
	one := func(use, short string, fn func(ctx context.Context, b *recipe.Barrier) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NAME",
			Short: short,
			Args:  Args(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, argv []string) error {
				return a.run(func(ctx context.Context, c *client.Client) error {
					if err := fn(ctx, recipe.NewBarrier(c, argv[0])); err != nil {
						return err
					}
					fmt.Fprintln(a.stdout, "OK")
					return nil
				})
			},
		}
	}
	wait := &cobra.Command{
		Use:   "wait NAME",
		Short: "Block until the barrier is released (no time limit; --timeout bounds connecting)",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := a.connect(sig)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := recipe.NewBarrier(c, argv[0]).Wait(sig); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, "OK")
			return nil
		},
	}
	cmd.AddCommand(
		one("hold", "Raise the barrier", func(ctx context.Context, b *recipe.Barrier) error { return b.Hold(ctx, 0) }),
		one("release", "Release the barrier, waking every waiter", func(ctx context.Context, b *recipe.Barrier) error { return b.Release(ctx) }),
		wait,
		a.barrierEnterCmd(),
		a.barrierLeaveCmd(),
	)
	return cmd
}

func (a *App) barrierEnterCmd() *cobra.Command {
	var (
		n       int
		ttlFlag string
	)
	cmd := &cobra.Command{
		Use:   "enter NAME -n N [--ttl 60s] [-- COMMAND [ARGS...]]",
		Short: "Enter a double barrier: return once N participants have entered",
		Long: `Join the double barrier NAME for N participants and wait, woken by a watch,
until N have joined (no time limit; --timeout bounds connecting only).

Without COMMAND, print this participant's ID and exit 0; pass the ID to
'dkv barrier leave NAME -n N --id ID' when the work is done. Between the two
the participant lives on a lease of --ttl that nothing renews: a participant
that has not left within --ttl counts as gone (so a crashed one does not
block the others' leave forever). Choose --ttl longer than the work.

With COMMAND, run it once N have entered (the lease is renewed while it
runs), then leave and wait for all to leave; dkv exits with COMMAND's exit
code. Every participant must use the same N. A NAME serves one round: use a
new NAME (with a round number) for the next. See docs/recipes.md, "Barriers".`,
		Example: `  id=$(dkv barrier enter batch/round-7 -n 4) && ./work && dkv barrier leave batch/round-7 -n 4 --id "$id"
  dkv barrier enter batch/round-8 -n 4 -- ./work`,
		Args: Args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, argv []string) error {
			dash := cmd.ArgsLenAtDash()
			if len(argv) < 1 || (dash < 0 && len(argv) != 1) || (dash >= 0 && (dash != 1 || len(argv) < 2)) {
				return Usagef("barrier enter needs NAME [-- COMMAND]")
			}
			ttl, err := parseTTL("--ttl", ttlFlag)
			if err != nil {
				return err
			}
			return a.barrierEnter(argv[0], n, ttl, argv[1:])
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 0, "number of participants (required)")
	cmd.Flags().StringVar(&ttlFlag, "ttl", "60s", "lease TTL: how long the participant counts as present after enter exits (or after a dkv running COMMAND stops renewing)")
	return cmd
}

func (a *App) barrierEnter(name string, n int, ttl time.Duration, command []string) error {
	sig, s, done, err := a.leaseSession(ttl)
	if err != nil {
		return err
	}
	defer done()
	d, err := recipe.NewDoubleBarrier(s, name, n)
	if err != nil {
		s.Close()
		return err
	}
	if err := d.Enter(sig); err != nil {
		s.Close() // revokes the lease: an interrupted enter leaves no participant behind
		return err
	}
	if len(command) == 0 {
		// The participant must outlive this process until leave (or
		// --ttl): stop renewing without revoking.
		s.Orphan()
		fmt.Fprintln(a.stdout, d.ID())
		return nil
	}
	defer s.Close()
	waitErr, lost, err := a.runChild(sig, s.Done(), nil, command[0], command[1:])
	if err != nil {
		return err
	}
	if lost {
		return fmt.Errorf("%w: double barrier %q participant was lost while %s ran (its lease could not be renewed)", client.ErrLocked, name, command[0])
	}
	if err := d.Leave(sig); err != nil {
		return err
	}
	return childResult(waitErr)
}

func (a *App) barrierLeaveCmd() *cobra.Command {
	var (
		n  int
		id string
	)
	cmd := &cobra.Command{
		Use:   "leave NAME -n N [--id ID]",
		Short: "Leave a double barrier: return once every participant has left",
		Long: `Remove the participant ID (printed by 'dkv barrier enter') from the double
barrier NAME and wait, woken by a watch, until every participant has left
(no time limit; --timeout bounds connecting only). Without --id, only wait.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := a.connect(sig)
			if err != nil {
				return err
			}
			defer c.Close()
			// Leave needs no lease of its own, but the barrier is built on
			// a session; a short one, revoked at exit.
			s, err := concurrency.NewSession(sig, c, concurrency.WithTTL(5*time.Second))
			if err != nil {
				return err
			}
			defer s.Close()
			d, err := recipe.NewDoubleBarrier(s, argv[0], n)
			if err != nil {
				return err
			}
			if id != "" {
				if err := d.SetID(id); err != nil {
					return err
				}
			}
			if err := d.Leave(sig); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, "OK")
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 0, "number of participants (required)")
	cmd.Flags().StringVar(&id, "id", "", "the participant ID 'dkv barrier enter' printed")
	return cmd
}
