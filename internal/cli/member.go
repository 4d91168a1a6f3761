package cli

import (
	"context"
	"fmt"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *App) memberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Cluster membership",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Usagef("member needs a subcommand: list, add, promote, remove")
		},
	}
	var serializable bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's members",
		Long: `List the cluster's members as the cluster agrees on them (needs a
quorum), or with --serializable as the member at --endpoints knows them
(answers without a quorum; may be stale).`,
		Args: Args(cobra.NoArgs),
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
it with 'dkv serve --name NAME --peer-addr PEER_ADDR --join ...' and the
cluster's peer secret: the same --initial-cluster-token as the members, or
--peer-secret-file with a copy of a member's DATA-DIR/peer-secret (or peer
TLS). It prints the command line to use.

It joins as a non-voting learner: it catches up without counting towards
the quorum, and 'dkv member promote NAME' makes it a voter once it has.
--voter adds a voter at once instead: until a process serves as NAME and
catches up, the cluster counts a member that does not answer in its
quorum (with 3 voters and a 4th that never starts, one more failure stops
every write), so it prints a warning.`,
		Args: Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if learner && voter {
				return Usagef("give --learner or --voter, not both")
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
				if err := a.printMembership(resp.GetMembers(), fmt.Sprintf("added %s (%s) as %s", argv[0], memberID(resp.GetMember().GetId()), role)); err != nil {
					return err
				}
				// What the new member needs; its secret comes from the
				// operator, never from the cluster (docs/cluster.md).
				out := a.stdout
				if a.JSON() {
					out = a.stderr
				}
				_, err = fmt.Fprint(out, joinStartLine(argv[0], argv[1], resp.GetMembers()))
				return err
			})
		},
	}
	add.Flags().BoolVar(&learner, "learner", false, "add as a non-voting learner (the default)")
	add.Flags().BoolVar(&voter, "voter", false, "add as a voter at once, counted in the quorum before it runs (warns)")
	cmd.AddCommand(add, &cobra.Command{
		Use:   "promote NAME",
		Short: "Make a caught-up learner a voter",
		Args:  Args(cobra.ExactArgs(1)),
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
		Args:  Args(cobra.ExactArgs(1)),
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

// joinStartLine tells how to start a member just added: its name and
// peer address, the members to join through, and the peer secret the
// cluster's members were started with, as a placeholder.
func joinStartLine(name, peer string, ms []*dkvpb.Member) string {
	var eps []string
	for _, m := range ms {
		if m.GetName() != name && m.GetClientUrl() != "" {
			eps = append(eps, m.GetClientUrl())
		}
	}
	join := strings.Join(eps, ",")
	if join == "" {
		join = "CLIENT_ADDR_OF_A_MEMBER"
	}
	return fmt.Sprintf("start it with:\n  dkv serve --name %s --peer-addr %s --join %s --initial-cluster-token TOKEN --data-dir DIR --client-addr ADDR\n"+
		"where TOKEN is the --initial-cluster-token the members were started with; or, instead of it,\n"+
		"  --peer-secret-file FILE, FILE a copy of a member's DATA-DIR/peer-secret (or the file the members were given),\n"+
		"and the cluster's peer TLS flags if it uses them. The secret is never sent over the client port.\n", name, peer, join)
}

func (a *App) printMembership(ms []*dkvpb.Member, msg string) error {
	if a.JSON() {
		out := []jsonMember{}
		for _, m := range ms {
			out = append(out, jsonMember{ID: memberID(m.GetId()), Name: m.GetName(), PeerURL: m.GetPeerUrl(), ClientURL: m.GetClientUrl(), IsLearner: m.GetIsLearner()})
		}
		return WriteJSON(a.stdout, map[string]any{"result": msg, "members": out})
	}
	_, err := fmt.Fprintln(a.stdout, msg)
	return err
}

func (a *App) leaderCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leader",
		Short: "Raft leadership",
		Args:  Args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return Usagef("leader needs a subcommand: transfer") },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "transfer NAME",
		Short: "Move leadership to the named voter",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				name := resolveMember(ctx, c, argv[0])
				resp, err := c.LeaderTransfer(ctx, name)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]any{"leader_id": memberID(resp.GetLeaderId())})
				}
				_, err = fmt.Fprintf(a.stdout, "%s (%s) is the leader\n", name, memberID(resp.GetLeaderId()))
				return err
			})
		},
	})
	return cmd
}
