package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// memberStatusTimeout bounds the wait for one member's Status.
const memberStatusTimeout = 2 * time.Second

// memberStatusEntry is one member in GET /v1/cluster/statuses: its own
// Status answer (as POST /v1/cluster/status gives it) or why there is
// none.
type memberStatusEntry struct {
	ID     string          `json:"id"` // decimal, as uint64 does not fit a JavaScript number
	Name   string          `json:"name"`
	Status json.RawMessage `json:"status,omitempty"`
	Error  string          `json:"error,omitempty"`
}

type memberStatusResponse struct {
	MemberID string              `json:"member_id"` // the member that answered
	Members  []memberStatusEntry `json:"members"`
}

var statusJSON = protojson.MarshalOptions{UseProtoNames: true}

// handleStatusesHTTP serves GET /v1/cluster/statuses: every member's own
// Status (raft term, applied index, db size, alarms, ...), asked by this
// member over the members' client URLs, so the answer is the same from a
// follower as from the leader. A member that does not answer within 2 s
// has an error instead. With auth on it needs what MemberList needs.
func (s *Server) handleStatusesHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := httpAuthContext(r)
	if _, err := s.checkCall(ctx, dkvpb.Cluster_MemberList_FullMethodName, &dkvpb.MemberListRequest{}); err != nil {
		httpError(w, wireError(err))
		return
	}
	ms, err := s.applied().Latest().Members()
	if err != nil {
		httpError(w, dkverr.New(dkverr.Internal, "%v", err))
		return
	}
	resp := memberStatusResponse{MemberID: strconv.FormatUint(s.memberID, 10), Members: make([]memberStatusEntry, len(ms))}
	var wg sync.WaitGroup
	for i, m := range ms {
		e := &resp.Members[i]
		e.ID, e.Name = strconv.FormatUint(m.GetId(), 10), m.GetName()
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.memberStatus(r.Context(), m)
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

// memberStatus asks member m for its Status: this member answers itself;
// another is called on its client URL with this member's proof (as the
// corruption check does).
func (s *Server) memberStatus(ctx context.Context, m *dkvpb.Member) (*dkvpb.StatusResponse, error) {
	cs := &clusterService{s: s}
	if m.GetId() == s.memberID {
		return cs.Status(ctx, &dkvpb.StatusRequest{})
	}
	if m.GetClientUrl() == "" {
		return nil, dkverr.New(dkverr.Unavailable, "member %s has not published its client URL yet", m.GetName())
	}
	conn, err := grpc.NewClient("passthrough:///"+m.GetClientUrl(), s.memberDialCreds())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
	defer cancel()
	st, err := dkvpb.NewClusterClient(conn).Status(s.withMemberProof(ctx, dkvpb.Cluster_Status_FullMethodName), &dkvpb.StatusRequest{})
	if err != nil {
		return nil, dkverr.FromGRPC(err)
	}
	return st, nil
}
