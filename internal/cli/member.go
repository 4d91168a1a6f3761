package cli

import (
	"context"
	"fmt"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *app) memberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Cluster membership",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("member needs a subcommand: list, add, promote, remove")
		},
	}
	var serializable bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's members",
		Long: `List the cluster's members as the cluster agrees on them (needs a
quorum), or with --serializable as the member at --endpoints knows them
(answers without a quorum; may be stale).`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			run, opts := a.run, []client.OpOption(nil)
			if serializable {
				run, opts = a.runMember, []client.OpOption{client.WithSerializable()}
			}
			return run(func(ctx context.Context, c *client.Client) error {
				ml, err := c.MemberList(ctx, opts...)
				if err != nil {
					return err
				}
				return a.printMemberList(ctx, ml)
			})
		},
	}
	list.Flags().BoolVar(&serializable, "serializable", false, "answer from the member at --endpoints without a quorum (may be stale)")
	cmd.AddCommand(list)
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
				return a.printMembership(resp.GetMembers(), fmt.Sprintf("added %s (%s) as %s", argv[0], memberID(resp.GetMember().GetId()), role))
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
				name := resolveMember(ctx, c, argv[0])
				resp, err := c.MemberPromote(ctx, name)
				if err != nil {
					return err
				}
				return a.printMembership(resp.GetMembers(), "promoted "+name)
			})
		},
	}, &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member (refused if the rest could not form a quorum)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				name := resolveMember(ctx, c, argv[0])
				resp, err := c.MemberRemove(ctx, name)
				if err != nil {
					return err
				}
				return a.printMembership(resp.GetMembers(), "removed "+name)
			})
		},
	})
	return cmd
}

func (a *app) printMembership(ms []*dkvpb.Member, msg string) error {
	if a.json() {
		out := []jsonMember{}
		for _, m := range ms {
			out = append(out, jsonMember{ID: memberID(m.GetId()), Name: m.GetName(), PeerURL: m.GetPeerUrl(), ClientURL: m.GetClientUrl(), IsLearner: m.GetIsLearner()})
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
				name := resolveMember(ctx, c, argv[0])
				resp, err := c.LeaderTransfer(ctx, name)
				if err != nil {
					return err
				}
				if a.json() {
					return writeJSON(a.stdout, map[string]any{"leader_id": memberID(resp.GetLeaderId())})
				}
				_, err = fmt.Fprintf(a.stdout, "%s (%s) is the leader\n", name, memberID(resp.GetLeaderId()))
				return err
			})
		},
	})
	return cmd
}
