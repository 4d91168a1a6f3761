package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *App) compactCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compact REV",
		Short: "Discard the history before revision REV",
		Long: `Discard every version older than revision REV. Reads at revisions below
REV then fail with exit code 8 (Compacted).`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			rev, err := strconv.ParseInt(argv[0], 10, 64)
			if err != nil || rev <= 0 {
				return Usagef("REV %q is not a positive integer", argv[0])
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.Compact(ctx, rev); err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]int64{"compact_revision": rev})
				}
				fmt.Fprintf(a.stdout, "compacted at revision %d\n", rev)
				return nil
			})
		},
	}
}
