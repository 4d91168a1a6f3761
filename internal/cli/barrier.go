package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/spf13/cobra"
)

// barrierCmd is `dkv barrier hold|release|wait NAME`.
func (a *app) barrierCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "barrier hold|release|wait NAME",
		Short: "A barrier: hold it up, release it, or wait until it is released",
		Long: `'dkv barrier hold NAME' raises the barrier NAME (exit 4, Conflict, if it is
already up); 'dkv barrier wait NAME' blocks until it is released (at once if
it is not up), woken by a watch; 'dkv barrier release NAME' releases it. See
docs/recipes.md, "Barriers".`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("barrier needs a subcommand: hold, release, wait")
		},
	}
	one := func(use, short string, fn func(ctx context.Context, b *recipe.Barrier) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NAME",
			Short: short,
			Args:  args(cobra.ExactArgs(1)),
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
		Args:  args(cobra.ExactArgs(1)),
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
	)
	return cmd
}
