package etcdapi

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// toHeader is a DKV response header as etcd's: the same four fields,
// cluster and member ids, the revision and the raft term. nil gives an
// empty header (etcd clients expect one on every response).
func toHeader(h *dkvpb.ResponseHeader) *etcdserverpb.ResponseHeader {
	if h == nil {
		return &etcdserverpb.ResponseHeader{}
	}
	return &etcdserverpb.ResponseHeader{
		ClusterId: h.GetClusterId(),
		MemberId:  h.GetMemberId(),
		Revision:  h.GetRevision(),
		RaftTerm:  h.GetRaftTerm(),
	}
}
