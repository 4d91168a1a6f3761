package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/encoding/protojson"
)

// MemberStatusEntry is one member in GET /v1/cluster/statuses: its own
// Status answer (as POST /v1/cluster/status gives it) or why there is
// none.
type MemberStatusEntry struct {
	ID     string          `json:"id"` // decimal, as uint64 does not fit a JavaScript number
	Name   string          `json:"name"`
	Status json.RawMessage `json:"status,omitempty"`
	Error  string          `json:"error,omitempty"`
}

type MemberStatusResponse struct {
	MemberID string              `json:"member_id"` // the member that answered
	Members  []MemberStatusEntry `json:"members"`
}

var statusJSON = protojson.MarshalOptions{UseProtoNames: true}

// ClusterStatuses serves GET /v1/cluster/statuses: every member's own
// Status (raft term, applied index, db size, alarms, ...), asked by this
// member over the members' client URLs, so the answer is the same from a
// follower as from the leader. A member that does not answer within 2 s
// has an error instead. With auth on it needs what MemberList needs.
func (a *API) ClusterStatuses(w http.ResponseWriter, r *http.Request) {
	ctx := a.n.RequestContext(r)
	if _, err := a.n.Authorize(ctx, dkvpb.Cluster_MemberList_FullMethodName, &dkvpb.MemberListRequest{}); err != nil {
		Error(w, a.n.WireError(err))
		return
	}
	ms, err := a.n.Applied().Latest().Members()
	if err != nil {
		Error(w, dkverr.New(dkverr.Internal, "%v", err))
		return
	}
	resp := MemberStatusResponse{MemberID: strconv.FormatUint(a.n.MemberID(), 10), Members: make([]MemberStatusEntry, len(ms))}
	var wg sync.WaitGroup
	for i, m := range ms {
		e := &resp.Members[i]
		e.ID, e.Name = strconv.FormatUint(m.GetId(), 10), m.GetName()
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := a.n.MemberStatus(r.Context(), m)
			if err != nil {
				e.Error = err.Error()
				return
			}
			b, err := statusJSON.Marshal(st)
			if err != nil {
				e.Error = err.Error()
				return
			}
			e.Status = b
		}()
	}
	wg.Wait()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// ProgressEntry is one member's replication progress as the leader sees it.
type ProgressEntry struct {
	ID        string `json:"id"` // decimal, as uint64 does not fit a JavaScript number
	Match     uint64 `json:"match"`
	Lag       uint64 `json:"lag"`
	Learner   bool   `json:"learner"`
	Active    bool   `json:"recent_active"`
	Replicate bool   `json:"replicating"`
}

type ProgressResponse struct {
	MemberID string          `json:"member_id"`
	IsLeader bool            `json:"is_leader"`
	Progress []ProgressEntry `json:"progress"`
}

// ClusterProgress serves GET /v1/cluster/progress: on the leader, each
// member's replicated (match) index and its lag behind the leader's last
// index; on another member, is_leader false and no progress (only the
// leader tracks it: ask the leader's HTTP port). With auth on it needs what MemberList needs.
func (a *API) ClusterProgress(w http.ResponseWriter, r *http.Request) {
	if _, err := a.n.Authorize(a.n.RequestContext(r), dkvpb.Cluster_MemberList_FullMethodName, &dkvpb.MemberListRequest{}); err != nil {
		Error(w, a.n.WireError(err))
		return
	}
	resp := ProgressResponse{MemberID: strconv.FormatUint(a.n.MemberID(), 10), Progress: []ProgressEntry{}}
	leader, last, ps, err := a.n.Progress(r.Context())
	resp.IsLeader = leader
	for _, pr := range ps {
		resp.Progress = append(resp.Progress, ProgressEntry{ID: strconv.FormatUint(pr.ID, 10), Match: pr.Match,
			Lag: last - min(last, pr.Match), Learner: pr.Learner, Active: pr.Active, Replicate: pr.Replicate})
	}
	if err != nil {
		Error(w, a.n.WireError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}
