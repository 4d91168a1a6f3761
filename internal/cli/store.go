package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

// storeCmd is `dkv store`: named stores (docs/data-model.md).
func (a *App) storeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Create, list, inspect and delete named stores",
		Long: `A named store is a separate keyspace in the cluster: a client in store S
(--store S, env DKV_STORE, client.Config.Store) sees only S's keys, watches,
locks and lease keys, and cannot name a key of another store. Stores must be
created before use. Quotas (--max-keys, --max-bytes; 0 is unlimited) refuse
writes over them with exit code 10 (NoSpace) while other stores keep writing.`,
	}
	var maxKeys, maxBytes int64
	var force bool
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a store (names: [a-z0-9][a-z0-9._-]{0,62})",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				s, err := c.CreateStore(ctx, argv[0], maxKeys, maxBytes)
				if err != nil {
					return err
				}
				return a.storeInfo(s, "Store "+argv[0]+" created")
			})
		},
	}
	setQuota := &cobra.Command{
		Use:   "set-quota NAME",
		Short: "Change a store's quota (--max-keys, --max-bytes; 0 is unlimited)",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				s, err := c.SetStoreQuota(ctx, argv[0], maxKeys, maxBytes)
				if err != nil {
					return err
				}
				return a.storeInfo(s, "Store "+argv[0]+" quota set")
			})
		},
	}
	for _, c := range []*cobra.Command{create, setQuota} {
		c.Flags().Int64Var(&maxKeys, "max-keys", 0, "the most live keys the store may hold (0: unlimited)")
		c.Flags().Int64Var(&maxBytes, "max-bytes", 0, "the most key and value bytes the store's live keys may hold (0: unlimited)")
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the named stores with their usage and quotas",
		Args:  Args(cobra.NoArgs),
		RunE: func(_ *cobra.Command, _ []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				stores, err := c.ListStores(ctx)
				if err != nil {
					return err
				}
				if a.JSON() {
					out := make([]map[string]any, 0, len(stores))
					for _, s := range stores {
						out = append(out, storeJSON(s))
					}
					return WriteJSON(a.stdout, out)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tKEYS\tBYTES\tMAX KEYS\tMAX BYTES")
				for _, s := range stores {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", s.Name, s.Keys, s.Bytes, limit(s.MaxKeys), limit(s.MaxBytes))
				}
				return tw.Flush()
			})
		},
	}
	stats := &cobra.Command{
		Use:   "stats NAME",
		Short: "Show a store's keys, bytes and quotas",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				s, err := c.StoreStats(ctx, argv[0])
				if err != nil {
					return err
				}
				return a.storeInfo(s, "")
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a store; one that still has keys only with --force, which deletes them too",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				n, err := c.DeleteStore(ctx, argv[0], force)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]any{"deleted_store": argv[0], "deleted_keys": n})
				}
				fmt.Fprintf(a.stdout, "Store %s deleted (%d keys)\n", argv[0], n)
				return nil
			})
		},
	}
	del.Flags().BoolVar(&force, "force", false, "delete the store's keys with it (at one revision)")
	cmd.AddCommand(create, setQuota, list, stats, del)
	return cmd
}

func limit(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func storeJSON(s client.StoreInfo) map[string]any {
	return map[string]any{"name": s.Name, "keys": s.Keys, "bytes": s.Bytes,
		"max_keys": s.MaxKeys, "max_bytes": s.MaxBytes, "create_revision": s.CreateRevision}
}

func (a *App) storeInfo(s client.StoreInfo, headline string) error {
	if a.JSON() {
		return WriteJSON(a.stdout, storeJSON(s))
	}
	if headline != "" {
		fmt.Fprintln(a.stdout, headline)
	}
	fmt.Fprintf(a.stdout, "name: %s\nkeys: %d (max %s)\nbytes: %d (max %s)\n", s.Name, s.Keys, limit(s.MaxKeys), s.Bytes, limit(s.MaxBytes))
	return nil
}
