package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

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
		RunE:  func(cmd *cobra.Command, _ []string) error { return usagef("member needs a subcommand: list") },
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
	return cmd
}
