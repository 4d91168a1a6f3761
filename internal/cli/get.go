package cli

import (
	"context"
	"fmt"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *app) getCmd() *cobra.Command {
	var (
		prefix, keysOnly, count, serializable bool
		rev, limit                            int64
		lockH                                 string
	)
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Read a key, or every key with a prefix",
		Long: `Read KEY and print its value followed by a newline, or exit with 3
(NotFound). --rev N reads the value as of revision N.

With --prefix, print every key starting with KEY as two lines each: the
key, then the value (with --keys-only, only the keys). --count prints the
number of matching keys. -o json prints
{"revision":R,"count":N,"more":false,"kvs":[{"key":..,"value":..,...}]}.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if limit < 0 || rev < 0 {
				return usagef("--limit and --rev must not be negative")
			}
			var opts []client.OpOption
			if prefix {
				opts = append(opts, client.WithPrefix())
			}
			if rev > 0 {
				opts = append(opts, client.WithRev(rev))
			}
			if limit > 0 {
				opts = append(opts, client.WithLimit(limit))
			}
			if keysOnly {
				opts = append(opts, client.WithKeysOnly())
			}
			if count {
				opts = append(opts, client.WithCountOnly())
			}
			if serializable {
				opts = append(opts, client.WithSerializable())
			}
			lo, err := lockOpt(lockH)
			if err != nil {
				return err
			}
			opts = append(opts, lo)
			key := argv[0]
			run := a.run
			if serializable {
				run = a.runMember // the named member's own, possibly stale, view
			}
			return run(func(ctx context.Context, c *client.Client) error {
				r, err := c.Range(ctx, key, opts...)
				if err != nil {
					return err
				}
				single := !prefix && !count
				if single && len(r.KVs) == 0 {
					if rev > 0 {
						return &client.Error{Kind: client.ErrNotFound, Msg: fmt.Sprintf("key %q not found at revision %d", key, rev)}
					}
					return &client.Error{Kind: client.ErrNotFound, Msg: fmt.Sprintf("key %q not found", key)}
				}
				switch {
				case a.json():
					return writeJSON(a.stdout, toJSONRange(r))
				case count:
					fmt.Fprintln(a.stdout, r.Count)
				case single && keysOnly:
					fmt.Fprintln(a.stdout, r.KVs[0].Key)
				case single:
					fmt.Fprintf(a.stdout, "%s\n", r.KVs[0].Value)
				default:
					writeKVs(a.stdout, r.KVs, keysOnly)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&prefix, "prefix", false, "read every key starting with KEY")
	f.Int64Var(&rev, "rev", 0, "read as of revision N (0: current)")
	f.Int64Var(&limit, "limit", 0, "return at most N keys (0: no limit)")
	f.BoolVar(&keysOnly, "keys-only", false, "print keys without values")
	f.BoolVar(&count, "count", false, "print only the number of keys")
	f.BoolVar(&serializable, "serializable", false, "read from the contacted node without a quorum round (may be stale)")
	f.StringVar(&lockH, "lock", "", "read only while lock HANDLE is current (exit 5 otherwise)")
	return cmd
}
