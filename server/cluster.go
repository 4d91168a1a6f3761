package server

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

// clusterService implements dkvpb.ClusterServer.
type clusterService struct {
	dkvpb.UnimplementedClusterServer
	s *Server
}

func (c *clusterService) Status(ctx context.Context, _ *dkvpb.StatusRequest) (*dkvpb.StatusResponse, error) {
	s := c.s
	st := s.node.Status()
	isLearner := false
	if cs := st.ConfState; cs != nil {
		for _, id := range cs.GetLearners() {
			if id == s.memberID {
				isLearner = true
			}
		}
	}
	return &dkvpb.StatusResponse{
		Header:           s.header(0),
		Name:             s.cfg.Name,
		MemberId:         s.memberID,
		LeaderId:         st.Lead,
		RaftTerm:         st.Term,
		RaftIndex:        st.Commit,
		RaftAppliedIndex: st.Applied,
		Revision:         s.kv.Revision(),
		CompactRevision:  s.kv.CompactRevision(),
		DbSize:           s.dbSize(),
		DbSizeInUse:      s.dbInUse(),
		Alarms:           s.sm.Alarms().List(),
		IsLearner:        isLearner,
		Version:          Version,
		QuotaBytes:       max(s.cfg.QuotaBytes, 0),
	}, nil
}

func (c *clusterService) HashKV(ctx context.Context, req *dkvpb.HashKVRequest) (*dkvpb.HashKVResponse, error) {
	if req.GetRevision() < 0 {
		return nil, dkverr.New(dkverr.InvalidInput, "revision %d is negative", req.GetRevision())
	}
	return c.s.hashKV(req.GetRevision())
}

func (c *clusterService) MemberList(ctx context.Context, req *dkvpb.MemberListRequest) (*dkvpb.MemberListResponse, error) {
	if req.GetLinearizable() {
		if err := c.s.node.WaitLinearizable(ctx); err != nil {
			return nil, err
		}
		if _, err := c.s.recheck(ctx, req); err != nil {
			return nil, err
		}
	}
	ms, err := c.s.applied().Latest().Members()
	if err != nil {
		return nil, err
	}
	return &dkvpb.MemberListResponse{Header: c.s.header(0), Members: c.s.withReachability(ms), LeaderId: c.s.node.Status().Lead}, nil
}

// dbSize is what the quota compares and status reports (storage.DBSize).
func (s *Server) dbSize() int64 {
	return int64(s.store.DBSize())
}
