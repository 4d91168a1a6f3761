package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

// parseLabels parses repeated --label NAME=VALUE flags.
func parseLabels(flags []string) (map[string]string, error) {
	ls := map[string]string{}
	for _, f := range flags {
		n, v, ok := strings.Cut(f, "=")
		if !ok || n == "" {
			return nil, Usagef("--label %q: want NAME=VALUE", f)
		}
		if _, dup := ls[n]; dup {
			return nil, Usagef("--label %q: label %q given twice", f, n)
		}
		ls[n] = v
	}
	return ls, nil
}

// formatLabels prints labels as name=value pairs in name order.
func formatLabels(ls map[string]string) string {
	names := make([]string, 0, len(ls))
	for n := range ls {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + ls[n]
	}
	return strings.Join(parts, " ")
}

type jsonQuery struct {
	Revision     int64     `json:"revision"`
	More         bool      `json:"more"`
	Continuation string    `json:"continuation,omitempty"`
	Plan         string    `json:"plan"`
	KVs          []*jsonKV `json:"kvs"`
}

func (a *App) queryCmd() *cobra.Command {
	var (
		limit, rev           int64
		scan, keysOnly, serz bool
		orderBy, cont        string
	)
	cmd := &cobra.Command{
		Use:   "query QUERY",
		Short: "List the keys whose labels match a query",
		Long: `List the keys matching QUERY, e.g.

  dkv query 'prefix=orders/ state=open customer=42' --limit 20

Terms are ANDed; OR between terms separates alternatives. name=v1|v2
(equality), name^=pre (prefix), name>=a name<m (range), prefix=P (the
keys). See docs/data-model.md. Each key prints as with get, with a
"labels:" line. The query must be served by an index (dkv index create);
without one it exits 14 (NoIndex) naming the index to create, unless
--scan. With --limit, a cut-short result ends with a line
"continuation: TOKEN"; --continue TOKEN prints the next page, at the same
revision.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			opts := []client.QueryOption{client.WithQueryLimit(limit), client.WithQueryRev(rev)}
			if scan {
				opts = append(opts, client.WithQueryScan())
			}
			if keysOnly {
				opts = append(opts, client.WithQueryKeysOnly())
			}
			if serz {
				opts = append(opts, client.WithQuerySerializable())
			}
			if orderBy != "" {
				opts = append(opts, client.WithQueryOrderBy(orderBy))
			}
			if cont != "" {
				tok, err := base64.RawURLEncoding.DecodeString(cont)
				if err != nil {
					return Usagef("--continue: not a continuation token: %v", err)
				}
				opts = append(opts, client.WithContinuation(tok))
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				r, err := c.Query(ctx, argv[0], opts...)
				if err != nil {
					return err
				}
				tok := ""
				if len(r.Continuation) > 0 {
					tok = base64.RawURLEncoding.EncodeToString(r.Continuation)
				}
				if a.JSON() {
					return WriteJSON(a.stdout, jsonQuery{Revision: r.Revision, More: r.More, Continuation: tok, Plan: r.Plan, KVs: toJSONKVs(r.KVs)})
				}
				writeKVs(a.stdout, r.KVs, keysOnly)
				if tok != "" {
					fmt.Fprintf(a.stdout, "continuation: %s\n", tok)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.Int64Var(&limit, "limit", 0, "print at most N keys (then a continuation token)")
	f.Int64Var(&rev, "rev", 0, "query the keyspace as of revision N")
	f.BoolVar(&scan, "scan", false, "scan the prefix when no index serves the query")
	f.BoolVar(&keysOnly, "keys-only", false, "print only the keys")
	f.BoolVar(&serz, "serializable", false, "read from the connected member without a quorum round (may be stale)")
	f.StringVar(&orderBy, "order-by", "", "order by key (default) or by this label's value")
	f.StringVar(&cont, "continue", "", "print the page after the one that printed TOKEN")
	return cmd
}

func (a *App) indexCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "index",
		Short: "Create, drop and list label indexes (for dkv query)",
	}
	create := &cobra.Command{
		Use:   "create PREFIX LABEL",
		Short: "Index label LABEL of the keys under PREFIX",
		Long: `Declare an index on LABEL for the keys under PREFIX ('' for every key) and
build it for the existing keys, in one raft entry. From then on every write
under PREFIX keeps it up to date in the same batch. Exit 4 (Conflict) if it
exists.`,
		Args: Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				ix, err := c.CreateIndex(ctx, argv[0], argv[1])
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, ix)
				}
				fmt.Fprintf(a.stdout, "OK index %d on %s under %q (revision %d)\n", ix.ID, ix.Label, ix.Prefix, ix.CreatedRevision)
				return nil
			})
		},
	}
	drop := &cobra.Command{
		Use:   "drop PREFIX LABEL",
		Short: "Remove an index (exit 3 if there is none)",
		Args:  Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.DropIndex(ctx, argv[0], argv[1]); err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, "OK")
				return nil
			})
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the indexes: PREFIX LABEL CREATED-REVISION per line",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				ixs, err := c.ListIndexes(ctx)
				if err != nil {
					return err
				}
				if a.JSON() {
					if ixs == nil {
						ixs = []client.Index{}
					}
					return WriteJSON(a.stdout, ixs)
				}
				for _, ix := range ixs {
					fmt.Fprintf(a.stdout, "%q %s %d\n", ix.Prefix, ix.Label, ix.CreatedRevision)
				}
				return nil
			})
		},
	}
	cmd.AddCommand(create, drop, list)
	return cmd
}
