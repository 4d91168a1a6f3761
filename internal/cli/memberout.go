package cli

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
)

type jsonMember struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	PeerURL   string `json:"peer_url"`
	ClientURL string `json:"client_url"`
	IsLearner bool   `json:"is_learner"`
	IsLeader  bool   `json:"is_leader"`
	// Version is the dkv server version the member last published ("" if
	// it runs one that does not publish it).
	Version string `json:"version"`
	// Reachability is how the member named by SeenBy sees this one: self,
	// reachable, unreachable or unknown (MemberList replies only).
	Reachability string `json:"reachability,omitempty"`
	// LastContactMs: ms since SeenBy last heard from it; -1 never.
	LastContactMs *int64 `json:"last_contact_ms,omitempty"`
}

var reachNames = map[dkvpb.Reachability_State]string{
	dkvpb.Reachability_STATE_UNKNOWN:     "unknown",
	dkvpb.Reachability_STATE_SELF:        "self",
	dkvpb.Reachability_STATE_REACHABLE:   "reachable",
	dkvpb.Reachability_STATE_UNREACHABLE: "unreachable",
}

// leaderView returns the leader's member list when ml came from a
// follower, for the leader is the one member that hears from all the
// others; ml itself if it came from the leader, there is no leader, or the
// leader cannot be asked within half of --timeout. The leader is asked at its
// advertised client URL, or else at whichever of --endpoints it is: from
// outside a container network the advertised name may not resolve while
// a published port reaches the same member.
func (a *App) leaderView(ctx context.Context, ml *dkvpb.MemberListResponse) *dkvpb.MemberListResponse {
	lead := ml.GetLeaderId()
	if lead == 0 || ml.GetHeader().GetMemberId() == lead {
		return ml
	}
	var urls []string
	for _, m := range ml.GetMembers() {
		if m.GetId() == lead && m.GetClientUrl() != "" {
			urls = append(urls, m.GetClientUrl())
		}
	}
	if eps, err := a.endpointList(); err == nil {
		for _, ep := range eps {
			if !slices.Contains(urls, ep) {
				urls = append(urls, ep)
			}
		}
	}
	// Half of --timeout: asking the leader may take a login (a bcrypt
	// compare) besides the call; the other half stays for the answer.
	ctx, cancel := context.WithTimeout(ctx, a.timeout/2)
	defer cancel()
	for _, url := range urls {
		if lv := a.memberListAt(ctx, url); lv.GetHeader().GetMemberId() == lead {
			return lv
		}
		if ctx.Err() != nil {
			break
		}
	}
	return ml
}

// memberListAt is the member list as the member at url answers it, nil if
// it cannot be asked before ctx ends.
func (a *App) memberListAt(ctx context.Context, url string) *dkvpb.MemberListResponse {
	deadline, _ := ctx.Deadline()
	user, pw, err := a.credentials()
	if err != nil {
		return nil
	}
	c, err := client.New(ctx, client.Config{Endpoints: []string{url}, AutoSyncInterval: -1, DialTimeout: time.Until(deadline), FailFast: true, MaxRetries: 1, TLS: a.tls.cfg,
		Username: user, Password: pw})
	if err != nil {
		return nil
	}
	defer c.Close()
	ml, err := dkvpb.NewClusterClient(c.Conn()).MemberList(ctx, &dkvpb.MemberListRequest{})
	if err != nil {
		return nil
	}
	return ml
}

// printMemberList prints dkv member list's table or JSON, with each
// member's reachability as the leader sees it (or, if the leader cannot
// be asked, the answering member).
func (a *App) printMemberList(ctx context.Context, ml *dkvpb.MemberListResponse) error {
	ml = a.leaderView(ctx, ml)
	seenBy := ml.GetHeader().GetMemberId()
	var seenByName string
	members := []jsonMember{}
	for _, m := range ml.GetMembers() {
		j := jsonMember{
			ID: memberID(m.GetId()), Name: m.GetName(), PeerURL: m.GetPeerUrl(),
			ClientURL: m.GetClientUrl(), IsLearner: m.GetIsLearner(), IsLeader: m.GetId() == ml.GetLeaderId(),
			Version: m.GetVersion(),
		}
		if r := m.GetReachability(); r != nil {
			j.Reachability = reachNames[r.GetState()]
			lc := r.GetLastContactMs()
			j.LastContactMs = &lc
		}
		if m.GetId() == seenBy {
			seenByName = m.GetName()
		}
		members = append(members, j)
	}
	if a.JSON() {
		return WriteJSON(a.stdout, map[string]any{"members": members, "seen_by": seenByName})
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPEER\tCLIENT\tVERSION\tROLE\tREACHABILITY\tLAST CONTACT")
	for _, m := range members {
		role := "follower"
		switch {
		case m.IsLeader:
			role = "leader"
		case m.IsLearner:
			role = "learner"
		}
		reach, last := m.Reachability, "-"
		if reach == "" {
			reach = "-" // an older server
		}
		if reach == "unknown" {
			// Only the leader hears from every member, and it could not
			// be asked: say whom to ask.
			reach = "unknown (" + seenByName + " is a follower; ask the leader)"
		}
		if lc := m.LastContactMs; lc != nil && reach != "self" && m.Reachability != "unknown" {
			last = "never"
			if *lc >= 0 {
				last = (time.Duration(*lc) * time.Millisecond).String() + " ago"
			}
		}
		ver := m.Version
		if ver == "" {
			ver = "-" // not published yet, or an older server
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Name, m.PeerURL, m.ClientURL, ver, role, reach, last)
	}
	return tw.Flush()
}
