package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

type jsonAlarm struct {
	MemberID   string `json:"member_id"`
	MemberName string `json:"member_name,omitempty"`
	Alarm      string `json:"alarm"`
	Reason     string `json:"reason"`
}

// alarmName is NOSPACE or CORRUPT.
func alarmName(t dkvpb.AlarmType) string {
	return strings.TrimPrefix(t.String(), "ALARM_TYPE_")
}

func (a *App) alarmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "alarm",
		Short: "List or disarm the cluster's alarms (NOSPACE, CORRUPT)",
		Args:  Args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return Usagef("alarm needs a subcommand: list, disarm") },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the raised alarms of every member",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				al, err := c.Alarms(ctx)
				if err != nil {
					return err
				}
				return a.printAlarms(ctx, c, al)
			})
		},
	})
	var member, kind string
	disarm := &cobra.Command{
		Use:   "disarm [--member NAME|ID] [--alarm NOSPACE|CORRUPT]",
		Short: "Clear raised alarms (all, or one member's, or one kind); prints those left",
		Long: `Clear raised alarms through raft: every alarm, or those of --member, or
those of kind --alarm. A NOSPACE alarm whose member still lacks space is
raised again within a second; a CORRUPT alarm whose member still
differs, at the next divergence check. Disarm CORRUPT only after the
member was replaced (docs/operations.md).`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t := dkvpb.AlarmType_ALARM_TYPE_NONE
			switch strings.ToUpper(kind) {
			case "":
			case "NOSPACE":
				t = dkvpb.AlarmType_ALARM_TYPE_NOSPACE
			case "CORRUPT":
				t = dkvpb.AlarmType_ALARM_TYPE_CORRUPT
			default:
				return Usagef("--alarm %q is not NOSPACE or CORRUPT", kind)
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				var id uint64
				if member != "" {
					var ok bool
					if id, ok = memberByNameOrID(ctx, c, member); !ok {
						return Usagef("--member %q is neither a member's name nor an id", member)
					}
				}
				al, err := c.AlarmDisarm(ctx, id, t)
				if err != nil {
					return err
				}
				return a.printAlarms(ctx, c, al)
			})
		},
	}
	disarm.Flags().StringVar(&member, "member", "", "only this member's alarms (name, or id in decimal or hex)")
	disarm.Flags().StringVar(&kind, "alarm", "", "only this kind: NOSPACE or CORRUPT")
	cmd.AddCommand(disarm)
	return cmd
}

func memberByNameOrID(ctx context.Context, c *client.Client, s string) (uint64, bool) {
	names := memberNames(ctx, c)
	for id, n := range names {
		if n == s {
			return id, true
		}
	}
	return parseMemberID(s)
}

func (a *App) printAlarms(ctx context.Context, c *client.Client, al []*dkvpb.AlarmMember) error {
	names := memberNames(ctx, c)
	out := []jsonAlarm{}
	for _, x := range al {
		out = append(out, jsonAlarm{MemberID: memberID(x.GetMemberId()), MemberName: names[x.GetMemberId()], Alarm: alarmName(x.GetAlarm()), Reason: x.GetReason()})
	}
	if a.JSON() {
		return WriteJSON(a.stdout, out)
	}
	if len(out) == 0 {
		_, err := fmt.Fprintln(a.stdout, "no alarms")
		return err
	}
	for _, x := range out {
		who := x.MemberID
		if x.MemberName != "" {
			who = x.MemberName + " (" + x.MemberID + ")"
		}
		if _, err := fmt.Fprintf(a.stdout, "%s  member %s: %s\n", x.Alarm, who, x.Reason); err != nil {
			return err
		}
	}
	return nil
}

func (a *App) defragCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "defrag",
		Short: "Compact each member at --endpoints' database in turn, giving back the space of deleted data",
		Long: `Have each member at --endpoints, one after the other, compact its
database (a Pebble manual compaction of the state, and a truncation of
the raft log to the applied index), which drops deleted and
compacted-away data and gives the space back. Reads
and writes go on meanwhile; they only share the disk with it. Run
'dkv compact REV' first to let it drop old history too.`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			eps, err := a.endpointList()
			if err != nil {
				return err
			}
			user, pw, err := a.credentials()
			if err != nil {
				return err
			}
			var firstErr error
			var rows []map[string]any
			for _, ep := range eps {
				ctx, cancel := context.WithTimeout(context.Background(), a.timeout+10*time.Minute)
				c, err := client.New(ctx, client.Config{Endpoints: []string{ep}, AutoSyncInterval: -1, DialTimeout: a.timeout, FailFast: true, TLS: a.tls.cfg, Username: user, Password: pw})
				var resp *dkvpb.DefragmentResponse
				if err == nil {
					resp, err = c.Defragment(ctx)
					c.Close()
				}
				cancel()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					fmt.Fprintf(a.stderr, "%s: defragmentation failed: %s\n", ep, errorText(err))
					continue
				}
				if a.JSON() {
					rows = append(rows, map[string]any{"endpoint": ep, "db_size_before": resp.GetDbSizeBefore(), "db_size_after": resp.GetDbSizeAfter(), "took_ms": resp.GetTookMs()})
					continue
				}
				fmt.Fprintf(a.stdout, "%s: defragmented: db size %s -> %s in %dms\n", ep, shortBytes(resp.GetDbSizeBefore()), shortBytes(resp.GetDbSizeAfter()), resp.GetTookMs())
			}
			if a.JSON() {
				if err := WriteJSON(a.stdout, rows); err != nil {
					return err
				}
			}
			return firstErr
		},
	}
}
