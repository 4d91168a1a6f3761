package server

import (
	"context"
	"net/http"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storekeys"
	"github.com/dkv-io/dkv/server/httpapi"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/grpc"
)

// httpNode is the node as the HTTP port's handlers (httpapi) see it.
type httpNode struct{ s *Server }

var _ httpapi.Node = httpNode{}

func (n httpNode) RequestContext(r *http.Request) context.Context { return httpAuthContext(r) }

func (n httpNode) RequestStore(r *http.Request) (context.Context, storekeys.Mapper, error) {
	return n.s.httpStore(r)
}

func (n httpNode) Authorize(ctx context.Context, method string, req any) (context.Context, error) {
	return n.s.checkCall(ctx, method, req)
}

func (n httpNode) KV() dkvpb.KVServer { return n.s.grpcAPI().KV() }

func (n httpNode) AuthView() *auth.View { return n.s.sm.Auth().View() }

func (n httpNode) Caller(ctx context.Context, v *auth.View) (*auth.User, error) {
	return n.s.callerOf(ctx, v)
}

func (n httpNode) WireError(err error) error { return wireError(err) }

func (n httpNode) WaitLinearizable(ctx context.Context) error { return n.s.node.WaitLinearizable(ctx) }

func (n httpNode) Applied() state.Reader { return n.s.applied() }

func (n httpNode) Revision() int64 { return n.s.header(0).GetRevision() }

func (n httpNode) LeaseRemaining(id int64) (time.Duration, bool) {
	_, rem, ok := n.s.lessor.Remaining(id)
	return rem, ok
}

func (n httpNode) MemberID() uint64 { return n.s.memberID }

// Progress reads the leader's view of each member's replication.
func (n httpNode) Progress(ctx context.Context) (leader bool, last uint64, ps []httpapi.Progress, err error) {
	self := n.s.memberID
	err = n.s.node.Inspect(ctx, func(rn *raft.RawNode) {
		if rn.BasicStatus().RaftState != raft.StateLeader {
			return
		}
		leader = true
		rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			if id == self {
				last = pr.Match
			}
		})
		rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
			ps = append(ps, httpapi.Progress{ID: id, Match: pr.Match, Learner: pr.IsLearner,
				Active: pr.RecentActive || id == self, Replicate: pr.State == tracker.StateReplicate})
		})
	})
	return leader, last, ps, err
}

// memberStatusTimeout bounds the wait for one member's Status.
const memberStatusTimeout = 2 * time.Second

// memberStatus asks member m for its Status: this member answers itself;
// another is called on its client URL with this member's proof (as the
// corruption check does).
func (n httpNode) MemberStatus(ctx context.Context, m *dkvpb.Member) (*dkvpb.StatusResponse, error) {
	if m.GetId() == n.s.memberID {
		return n.s.grpcAPI().Cluster().Status(ctx, &dkvpb.StatusRequest{})
	}
	if m.GetClientUrl() == "" {
		return nil, dkverr.New(dkverr.Unavailable, "member %s has not published its client URL yet", m.GetName())
	}
	conn, err := grpc.NewClient("passthrough:///"+m.GetClientUrl(), n.s.memberDialCreds())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
	defer cancel()
	st, err := dkvpb.NewClusterClient(conn).Status(n.s.withMemberProof(ctx, dkvpb.Cluster_Status_FullMethodName), &dkvpb.StatusRequest{})
	if err != nil {
		return nil, dkverr.FromGRPC(err)
	}
	return st, nil
}
