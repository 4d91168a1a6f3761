package cli

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *App) endpointHashKVCmd(cluster *bool) *cobra.Command {
	var rev int64
	cmd := &cobra.Command{
		Use:   "hashkv [--rev REV]",
		Short: "Show each endpoint's hash of the keyspace at a revision, to compare members or a restore",
		Long: `A row per endpoint: ENDPOINT HASH REVISION COMPACT REVISION APPLIED INDEX
STATE HASH. HASH covers every key's value, versions and lease at REVISION
(default: the member's current one); members that agree print the same
HASH at the same REVISION. STATE HASH covers leases and locks as of
APPLIED INDEX, and compares only between rows with the same APPLIED
INDEX. An endpoint that does not answer makes dkv exit 7.`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rev < 0 {
				return Usagef("--rev %d is negative", rev)
			}
			eps, err := a.endpointTargets(*cluster)
			if err != nil {
				return err
			}
			type row struct {
				Endpoint        string `json:"endpoint"`
				Hash            string `json:"hash,omitempty"`
				Revision        int64  `json:"revision,omitempty"`
				CompactRevision int64  `json:"compact_revision,omitempty"`
				AppliedIndex    uint64 `json:"applied_index,omitempty"`
				StateHash       string `json:"state_hash,omitempty"`
				Error           string `json:"error,omitempty"`
			}
			var rows []row
			var firstErr error
			for _, ep := range eps {
				ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
				err := a.oneEndpoint(ctx, ep, func(ctx context.Context, c *client.Client) error {
					h, err := c.HashKV(ctx, rev)
					if err != nil {
						return err
					}
					rows = append(rows, row{ep, strconv.FormatUint(h.GetHash(), 10), h.GetRevision(), h.GetCompactRevision(), h.GetAppliedIndex(), strconv.FormatUint(h.GetStateHash(), 10), ""})
					return nil
				})
				cancel()
				if err != nil {
					rows = append(rows, row{Endpoint: ep, Error: errorText(err)})
					if firstErr == nil {
						firstErr = err
					}
				}
			}
			if a.JSON() {
				if err := WriteJSON(a.stdout, rows); err != nil {
					return err
				}
				return firstErr
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ENDPOINT\tHASH\tREVISION\tCOMPACT REVISION\tAPPLIED INDEX\tSTATE HASH\tERRORS")
			for _, r := range rows {
				if r.Error != "" {
					fmt.Fprintf(tw, "%s\t\t\t\t\t\t%s\n", r.Endpoint, r.Error)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t\n", r.Endpoint, r.Hash, r.Revision, r.CompactRevision, r.AppliedIndex, r.StateHash)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return firstErr
		},
	}
	cmd.Flags().Int64Var(&rev, "rev", 0, "revision to hash at (0: each member's current revision)")
	return cmd
}
