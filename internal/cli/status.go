package cli

import (
	"context"
	"fmt"
	"io"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

type jsonStatus struct {
	Name             string      `json:"name"`
	MemberID         string      `json:"member_id"`
	LeaderID         string      `json:"leader_id"`
	LeaderName       string      `json:"leader_name,omitempty"`
	RaftTerm         uint64      `json:"raft_term"`
	RaftIndex        uint64      `json:"raft_index"`
	RaftAppliedIndex uint64      `json:"raft_applied_index"`
	Revision         int64       `json:"revision"`
	CompactRevision  int64       `json:"compact_revision"`
	DBSize           int64       `json:"db_size"`
	DBSizeInUse      int64       `json:"db_size_in_use"`
	Alarms           []jsonAlarm `json:"alarms"`
	IsLearner        bool        `json:"is_learner"`
	Version          string      `json:"version"`
}

func (a *App) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the status of the member at --endpoints",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Per member: asks the endpoint named, never a discovered one.
			return a.runMember(func(ctx context.Context, c *client.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				s := statusOf(st)
				if st.GetLeaderId() != 0 && st.GetLeaderId() != st.GetMemberId() {
					s.LeaderName = memberNames(ctx, c)[st.GetLeaderId()]
				}
				if a.JSON() {
					return WriteJSON(a.stdout, s)
				}
				return writeStatus(a.stdout, s)
			})
		},
	}
}

// statusOf is the -o json form of a status reply, without LeaderName.
func statusOf(st *dkvpb.StatusResponse) jsonStatus {
	s := jsonStatus{
		Name:             st.GetName(),
		MemberID:         memberID(st.GetMemberId()),
		LeaderID:         memberID(st.GetLeaderId()),
		RaftTerm:         st.GetRaftTerm(),
		RaftIndex:        st.GetRaftIndex(),
		RaftAppliedIndex: st.GetRaftAppliedIndex(),
		Revision:         st.GetRevision(),
		CompactRevision:  st.GetCompactRevision(),
		DBSize:           st.GetDbSize(),
		DBSizeInUse:      st.GetDbSizeInUse(),
		Alarms:           []jsonAlarm{},
		IsLearner:        st.GetIsLearner(),
		Version:          st.GetVersion(),
	}
	for _, x := range st.GetAlarms() {
		s.Alarms = append(s.Alarms, jsonAlarm{MemberID: memberID(x.GetMemberId()), Alarm: alarmName(x.GetAlarm()), Reason: x.GetReason()})
	}
	if st.GetLeaderId() == st.GetMemberId() {
		s.LeaderName = st.GetName()
	}
	return s
}

// writeStatus is the text form of dkv status.
func writeStatus(w io.Writer, s jsonStatus) error {
	leader := "none (no leader known)"
	if s.LeaderID != "0" {
		leader = s.LeaderID
		if s.LeaderName != "" {
			leader = s.LeaderName + " (" + s.LeaderID + ")"
		}
	}
	_, err := fmt.Fprintf(w, "name:              %s\nmember id:         %s\nleader:            %s\nraft term:         %d\nraft index:        %d\nraft applied:      %d\nrevision:          %d\ncompact revision:  %d\ndb size:           %s\ndb size in use:    %s\nlearner:           %v\nversion:           %s\n",
		s.Name, s.MemberID, leader, s.RaftTerm, s.RaftIndex, s.RaftAppliedIndex, s.Revision, s.CompactRevision, humanBytes(s.DBSize), humanBytes(s.DBSizeInUse), s.IsLearner, s.Version)
	if err != nil {
		return err
	}
	if len(s.Alarms) == 0 {
		_, err = fmt.Fprintf(w, "alarms:            none\n")
		return err
	}
	for i, x := range s.Alarms {
		label := "alarms:           "
		if i > 0 {
			label = "                  "
		}
		if _, err := fmt.Fprintf(w, "%s %s member %s: %s\n", label, x.Alarm, x.MemberID, x.Reason); err != nil {
			return err
		}
	}
	return nil
}
