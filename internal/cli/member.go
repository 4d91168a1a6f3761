package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

type jsonMember struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	PeerURL   string `json:"peer_url"`
	ClientURL string `json:"client_url"`
	IsLearner bool   `json:"is_learner"`
	IsLeader  bool   `json:"is_leader"`
}

func (a *app) memberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Cluster membership",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("member needs a subcommand: list, add, promote, remove")
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the cluster's members",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				ml, err := c.MemberList(ctx)
				if err != nil {
					return err
				}
				members := []jsonMember{}
				for _, m := range ml.GetMembers() {
					members = append(members, jsonMember{
						ID: fmt.Sprintf("%x", m.GetId()), Name: m.GetName(), PeerURL: m.GetPeerUrl(),
						ClientURL: m.GetClientUrl(), IsLearner: m.GetIsLearner(), IsLeader: m.GetId() == ml.GetLeaderId(),
					})
				}
				if a.json() {
					return writeJSON(a.stdout, map[string]any{"members": members})
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tPEER\tCLIENT\tROLE")
				for _, m := range members {
					role := "follower"
					switch {
					case m.IsLeader:
						role = "leader"
					case m.IsLearner:
						role = "learner"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Name, m.PeerURL, m.ClientURL, role)
				}
				return tw.Flush()
			})
		},
	})
	var learner, voter bool
	add := &cobra.Command{
		Use:   "add NAME PEER_ADDR [--voter]",
		Short: "Add a member, as a learner unless --voter (start it afterwards with dkv serve --join)",
		Long: `Add a member NAME that the other members reach at PEER_ADDR, then start
it with 'dkv serve --name NAME --peer-addr PEER_ADDR --join ...'.

It joins as a non-voting learner: it catches up without counting towards
the quorum, and 'dkv member promote NAME' makes it a voter once it has.
--voter adds a voter at once instead: until a process serves as NAME and
catches up, the cluster counts a member that does not answer in its
quorum (with 3 voters and a 4th that never starts, one more failure stops
every write), so it prints a warning.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if learner && voter {
				return usagef("give --learner or --voter, not both")
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				resp, err := c.MemberAdd(ctx, argv[0], argv[1], !voter)
				if err != nil {
					return err
				}
				role := "a learner; promote it with 'dkv member promote " + argv[0] + "' once it has caught up"
				if voter {
					role = "a voter"
					voters := 0
					for _, m := range resp.GetMembers() {
						if !m.GetIsLearner() {
							voters++
						}
					}
					fmt.Fprintf(a.stderr, "warning: %s is a voter from now on: until a dkv serve --name %s --peer-addr %s is running and caught up, "+
						"the cluster counts a member that does not answer (%d of %d voters needed for a quorum)\n",
						argv[0], argv[0], argv[1], voters/2+1, voters)
				}
				return a.printMembership(resp.GetMembers(), fmt.Sprintf("added %s (%x) as %s", argv[0], resp.GetMember().GetId(), role))
			})
		},
	}
	add.Flags().BoolVar(&learner, "learner", false, "add as a non-voting learner (the default)")
	add.Flags().BoolVar(&voter, "voter", false, "add as a voter at once, counted in the quorum before it runs (warns)")
	cmd.AddCommand(add, &cobra.Command{
		Use:   "promote NAME",
		Short: "Make a caught-up learner a voter",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				resp, err := c.MemberPromote(ctx, argv[0])
				if err != nil {
					return err
				}
				return a.printMembership(resp.GetMembers(), "promoted "+argv[0])
			})
		},
	}, &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member (refused if the rest could not form a quorum)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				resp, err := c.MemberRemove(ctx, argv[0])
				if err != nil {
					return err
				}
				return a.printMembership(resp.GetMembers(), "removed "+argv[0])
			})
		},
	})
	return cmd
}

func (a *app) printMembership(ms []*dkvpb.Member, msg string) error {
	if a.json() {
		out := []jsonMember{}
		for _, m := range ms {
			out = append(out, jsonMember{ID: fmt.Sprintf("%x", m.GetId()), Name: m.GetName(), PeerURL: m.GetPeerUrl(), ClientURL: m.GetClientUrl(), IsLearner: m.GetIsLearner()})
		}
		return writeJSON(a.stdout, map[string]any{"result": msg, "members": out})
	}
	_, err := fmt.Fprintln(a.stdout, msg)
	return err
}

func (a *app) leaderCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leader",
		Short: "Raft leadership",
		Args:  args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return usagef("leader needs a subcommand: transfer") },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "transfer NAME",
		Short: "Move leadership to the named voter",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				resp, err := c.LeaderTransfer(ctx, argv[0])
				if err != nil {
					return err
				}
				if a.json() {
					return writeJSON(a.stdout, map[string]any{"leader_id": fmt.Sprintf("%x", resp.GetLeaderId())})
				}
				_, err = fmt.Fprintf(a.stdout, "%s (%x) is the leader\n", argv[0], resp.GetLeaderId())
				return err
			})
		},
	})
	return cmd
}
