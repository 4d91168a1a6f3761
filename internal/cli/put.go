package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *App) putCmd() *cobra.Command {
	var (
		ifAbsent  bool
		ifVersion int64
		ifModRev  int64
		prev      bool
		lease     int64
		ttl       string
		lockH     string
		labels    []string
		keepLbls  bool
	)
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Write a key (VALUE - reads the value from stdin)",
		Long: `Write VALUE under KEY. VALUE "-" reads the value from stdin, byte for byte
(a trailing newline is kept). Prints OK; with -o json, the revision.
--if-absent, --if-version and --if-mod-revision make the put conditional:
when the condition fails nothing is written and dkv exits with 4
(Conflict).`,
		Args: Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			value := []byte(argv[1])
			if argv[1] == "-" {
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return fmt.Errorf("reading value from stdin: %w", err)
				}
				value = b
			}
			var opts []client.OpOption
			if ifAbsent {
				opts = append(opts, client.IfAbsent())
			}
			if ifVersion != 0 {
				opts = append(opts, client.IfVersion(ifVersion))
			}
			if ifModRev != 0 {
				opts = append(opts, client.IfModRevision(ifModRev))
			}
			if prev {
				opts = append(opts, client.WithPrevKV())
			}
			if lease != 0 {
				opts = append(opts, client.WithLease(lease))
			}
			if len(labels) > 0 {
				ls, err := parseLabels(labels)
				if err != nil {
					return err
				}
				opts = append(opts, client.WithLabels(ls))
			}
			if keepLbls {
				opts = append(opts, client.WithIgnoreLabels())
			}
			lo, err := lockOpt(lockH)
			if err != nil {
				return err
			}
			opts = append(opts, lo)
			if ttl != "" {
				d, err := parseTTL("--ttl", ttl)
				if err != nil {
					return err
				}
				opts = append(opts, client.WithTTL(d))
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				r, err := c.Put(ctx, argv[0], value, opts...)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, jsonPut{Revision: r.Revision, PrevKV: toJSONKV(r.PrevKV), Lease: r.Lease})
				}
				fmt.Fprintln(a.stdout, "OK")
				if r.Lease != 0 {
					fmt.Fprintf(a.stdout, "lease %d\n", r.Lease)
				}
				if r.PrevKV != nil {
					writeKVs(a.stdout, []*client.KeyValue{r.PrevKV}, false)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&ifAbsent, "if-absent", false, "write only if the key does not exist")
	f.Int64Var(&ifVersion, "if-version", 0, "write only if the key's version is N")
	f.Int64Var(&ifModRev, "if-mod-revision", 0, "write only if the key was last modified at revision N (dkv get -o json shows mod_revision)")
	f.BoolVar(&prev, "prev", false, "also print the previous key and value")
	f.Int64Var(&lease, "lease", 0, "attach the key to lease ID")
	f.StringVar(&ttl, "ttl", "", "delete the key after this long (e.g. 30s; grants a lease, printed after OK)")
	f.StringVar(&lockH, "lock", "", "write under lock HANDLE (from 'dkv lock acquire'); exit 5 if it is not current")
	f.StringArrayVar(&labels, "label", nil, "set label NAME=VALUE (repeatable); the put replaces the key's labels (docs/data-model.md)")
	f.BoolVar(&keepLbls, "keep-labels", false, "keep the key's current labels")
	return cmd
}
