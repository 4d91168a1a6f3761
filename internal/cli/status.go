package cli

import (
	"context"
	"fmt"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

type jsonStatus struct {
	Name             string `json:"name"`
	MemberID         string `json:"member_id"`
	LeaderID         string `json:"leader_id"`
	RaftTerm         uint64 `json:"raft_term"`
	RaftIndex        uint64 `json:"raft_index"`
	RaftAppliedIndex uint64 `json:"raft_applied_index"`
	Revision         int64  `json:"revision"`
	CompactRevision  int64  `json:"compact_revision"`
	DBSize           int64  `json:"db_size"`
	IsLearner        bool   `json:"is_learner"`
	Version          string `json:"version"`
}

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the status of the member at --endpoints",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Per member: asks the endpoint named, never a discovered one.
			return a.runMember(func(ctx context.Context, c *client.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				s := jsonStatus{
					Name:             st.GetName(),
					MemberID:         fmt.Sprintf("%x", st.GetMemberId()),
					LeaderID:         fmt.Sprintf("%x", st.GetLeaderId()),
					RaftTerm:         st.GetRaftTerm(),
					RaftIndex:        st.GetRaftIndex(),
					RaftAppliedIndex: st.GetRaftAppliedIndex(),
					Revision:         st.GetRevision(),
					CompactRevision:  st.GetCompactRevision(),
					DBSize:           st.GetDbSize(),
					IsLearner:        st.GetIsLearner(),
					Version:          st.GetVersion(),
				}
				if a.json() {
					return writeJSON(a.stdout, s)
				}
				fmt.Fprintf(a.stdout, "name:              %s\nmember id:         %s\nleader id:         %s\nraft term:         %d\nraft index:        %d\nraft applied:      %d\nrevision:          %d\ncompact revision:  %d\ndb size:           %d\nlearner:           %v\nversion:           %s\n",
					s.Name, s.MemberID, s.LeaderID, s.RaftTerm, s.RaftIndex, s.RaftAppliedIndex, s.Revision, s.CompactRevision, s.DBSize, s.IsLearner, s.Version)
				return nil
			})
		},
	}
}
