package cli

import (
	"fmt"
	"text/tabwriter"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

type jsonMember struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	PeerURL   string `json:"peer_url"`
	ClientURL string `json:"client_url"`
	IsLearner bool   `json:"is_learner"`
	IsLeader  bool   `json:"is_leader"`
}

// printMemberList prints dkv member list's table or JSON.
func (a *app) printMemberList(ml *dkvpb.MemberListResponse) error {
	members := []jsonMember{}
	for _, m := range ml.GetMembers() {
		members = append(members, jsonMember{
			ID: memberID(m.GetId()), Name: m.GetName(), PeerURL: m.GetPeerUrl(),
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
}
