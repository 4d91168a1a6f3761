package cli

import (
	"context"
	"fmt"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *App) delCmd() *cobra.Command {
	var prefix, prev bool
	var lockH string
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete", "rm"},
		Short:   "Delete a key, or every key with a prefix",
		Long: `Delete KEY (with --prefix, every key starting with KEY) and print the
number of keys deleted; deleting a missing key prints 0 and succeeds. With
--prev, the deleted keys and values follow, two lines each.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			var opts []client.OpOption
			if prefix {
				opts = append(opts, client.WithPrefix())
			}
			if prev {
				opts = append(opts, client.WithPrevKV())
			}
			lo, err := lockOpt(lockH)
			if err != nil {
				return err
			}
			opts = append(opts, lo)
			return a.run(func(ctx context.Context, c *client.Client) error {
				r, err := c.Delete(ctx, argv[0], opts...)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, jsonDelete{Revision: r.Revision, Deleted: r.Deleted, PrevKVs: toJSONKVs(r.PrevKVs)})
				}
				fmt.Fprintln(a.stdout, r.Deleted)
				writeKVs(a.stdout, r.PrevKVs, false)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&prefix, "prefix", false, "delete every key starting with KEY")
	cmd.Flags().BoolVar(&prev, "prev", false, "print the deleted keys and values")
	cmd.Flags().StringVar(&lockH, "lock", "", "delete under lock HANDLE; exit 5 if it is not current")
	return cmd
}
