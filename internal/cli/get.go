package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/spf13/cobra"
)

func (a *App) getCmd() *cobra.Command {
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
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if limit < 0 {
				return Usagef("--limit %d: it must not be negative (0: no limit)", limit)
			}
			if rev < 0 {
				return Usagef("--rev %d: it must not be negative (0: the latest revision)", rev)
			}
			// common: the options every page of a prefix read shares.
			var common []client.OpOption
			if keysOnly {
				common = append(common, client.WithKeysOnly())
			}
			if serializable {
				common = append(common, client.WithSerializable())
			}
			lo, err := lockOpt(lockH)
			if err != nil {
				return err
			}
			common = append(common, lo)
			key := argv[0]
			run := a.run
			if serializable {
				run = a.runMember // the named member's own, possibly stale, view
			}
			if prefix && !count {
				return run(func(ctx context.Context, c *client.Client) error {
					return a.getPaged(ctx, c, key, rev, limit, keysOnly, common)
				})
			}
			opts := append([]client.OpOption(nil), common...)
			if prefix {
				opts = append(opts, client.WithPrefix())
			}
			if rev > 0 {
				opts = append(opts, client.WithRev(rev))
			}
			if limit > 0 {
				opts = append(opts, client.WithLimit(limit))
			}
			if count {
				opts = append(opts, client.WithCountOnly())
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
				case a.JSON():
					return WriteJSON(a.stdout, toJSONRange(r))
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

// getPageKeys is how many keys one page of a prefix read asks for at
// first; a page the transport refuses as too large is halved.
var getPageKeys int64 = 1000

// getPaged reads a prefix page by page at one revision, so a prefix
// whose reply would exceed the gRPC message limit still prints in full,
// and consistently: every page reads the revision the first one saw.
// Text output streams as the pages come; JSON is one object, as for a
// single read.
func (a *App) getPaged(ctx context.Context, c *client.Client, prefix string, rev, limit int64, keysOnly bool, common []client.OpOption) error {
	end := "\x00" // every key: the prefix is empty or all 0xff bytes
	if e := keyrange.PrefixEnd([]byte(prefix)); e != nil {
		end = string(e)
	}
	if prefix == "" {
		prefix = "\x00" // the smallest key: keys are never empty
	}
	page := getPageKeys
	var (
		all   []*client.KeyValue
		first *client.RangeResult
		start = prefix
		got   int64
		more  bool
	)
	for {
		n := page
		if limit > 0 {
			n = min(n, limit-got)
		}
		opts := append([]client.OpOption{client.WithRange(end), client.WithLimit(n)}, common...)
		if rev > 0 {
			opts = append(opts, client.WithRev(rev))
		}
		r, err := c.Range(ctx, start, opts...)
		if errors.Is(err, client.ErrInvalidInput) && page > 1 {
			// Most likely the reply is over the message size limit
			// (values up to 1 MiB each); an invalid request fails again
			// at one key per page.
			page /= 2
			continue
		}
		if err != nil {
			return err
		}
		if first == nil {
			first, rev = r, r.Revision
		}
		got += int64(len(r.KVs))
		if a.JSON() {
			all = append(all, r.KVs...)
		} else {
			writeKVs(a.stdout, r.KVs, keysOnly)
		}
		if !r.More || len(r.KVs) == 0 {
			break
		}
		if limit > 0 && got >= limit {
			more = true
			break
		}
		start = r.KVs[len(r.KVs)-1].Key + "\x00"
	}
	if a.JSON() {
		return WriteJSON(a.stdout, toJSONRange(&client.RangeResult{Revision: first.Revision, Count: first.Count, More: more, KVs: all}))
	}
	return nil
}
