package etcdapi

import (
	"context"
	"net"
	"net/url"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clusterServer is etcd's Cluster service over DKV's membership. etcd
// names members by id, DKV by name: each call by id looks the member's
// name up in the member table first. DKV keeps one peer and one client
// address per member, host:port; etcd shows URLs, so they are shown with
// the scheme the ports speak.
type clusterServer struct {
	etcdserverpb.UnimplementedClusterServer
	d Deps
}

// toMember is m as etcd shows it. A member that has not published its
// client address has not started; etcd gives such a member no name (its
// name comes with the client URLs when it starts), and etcdctl member list
// prints it as "unstarted".
func (c *clusterServer) toMember(m *dkvpb.Member) *etcdserverpb.Member {
	out := &etcdserverpb.Member{ID: m.GetId(), Name: m.GetName(), IsLearner: m.GetIsLearner()}
	if m.GetClientUrl() == "" {
		out.Name = ""
	}
	if m.GetPeerUrl() != "" {
		out.PeerURLs = []string{c.d.PeerScheme + "://" + m.GetPeerUrl()}
	}
	if m.GetClientUrl() != "" {
		out.ClientURLs = []string{c.d.ClientScheme + "://" + m.GetClientUrl()}
	}
	return out
}

func (c *clusterServer) toMembers(ms []*dkvpb.Member) []*etcdserverpb.Member {
	out := make([]*etcdserverpb.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, c.toMember(m))
	}
	return out
}

func (c *clusterServer) list(ctx context.Context, linearizable bool) (*dkvpb.MemberListResponse, error) {
	req := &dkvpb.MemberListRequest{Linearizable: linearizable}
	return call(ctx, c.d, dkvpb.Cluster_MemberList_FullMethodName, req, func(ctx context.Context) (*dkvpb.MemberListResponse, error) {
		return c.d.Cluster.MemberList(ctx, req)
	})
}

// byID is the member with id, after a linearizable read of the table.
func (c *clusterServer) byID(ctx context.Context, id uint64) (*dkvpb.Member, error) {
	l, err := c.list(ctx, true)
	if err != nil {
		return nil, toEtcdErr(err)
	}
	for _, m := range l.GetMembers() {
		if m.GetId() == id {
			return m, nil
		}
	}
	return nil, rpctypes.ErrGRPCMemberNotFound
}

func (c *clusterServer) MemberList(ctx context.Context, r *etcdserverpb.MemberListRequest) (*etcdserverpb.MemberListResponse, error) {
	l, err := c.list(ctx, r.Linearizable)
	if err != nil {
		return nil, toEtcdErr(err)
	}
	return &etcdserverpb.MemberListResponse{Header: toHeader(l.GetHeader()), Members: c.toMembers(l.GetMembers())}, nil
}

// peerAddr is the one peer URL an etcd member request names, as DKV's
// host:port.
func peerAddr(urls []string) (string, error) {
	if len(urls) != 1 {
		return "", status.Errorf(codes.InvalidArgument, "%s (DKV members have exactly one peer URL; %d given)", rpctypes.ErrorDesc(rpctypes.ErrGRPCMemberBadURLs), len(urls))
	}
	s := urls[0]
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "", rpctypes.ErrGRPCMemberBadURLs
		}
		s = u.Host
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return "", rpctypes.ErrGRPCMemberBadURLs
	}
	return s, nil
}

// MemberAdd adds a member named by its peer address (etcd's request
// carries no name; DKV's member id is derived from name and peer
// address): start the new node with --name set to that host:port and
// --join, and it finds itself already added.
func (c *clusterServer) MemberAdd(ctx context.Context, r *etcdserverpb.MemberAddRequest) (*etcdserverpb.MemberAddResponse, error) {
	addr, err := peerAddr(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	req := &dkvpb.MemberAddRequest{Name: addr, PeerUrl: addr, IsLearner: r.IsLearner}
	resp, err := call(ctx, c.d, dkvpb.Cluster_MemberAdd_FullMethodName, req, func(ctx context.Context) (*dkvpb.MemberAddResponse, error) {
		return c.d.Cluster.MemberAdd(ctx, req)
	})
	if err != nil {
		if de, ok := dkvErr(err); ok && de.Code == dkverr.Conflict {
			// The name is the peer address, so either conflict is one
			// of peer URLs.
			return nil, rpctypes.ErrGRPCPeerURLExist
		}
		return nil, toEtcdErr(err)
	}
	return &etcdserverpb.MemberAddResponse{Header: toHeader(resp.GetHeader()), Member: c.toMember(resp.GetMember()), Members: c.toMembers(resp.GetMembers())}, nil
}

func (c *clusterServer) MemberRemove(ctx context.Context, r *etcdserverpb.MemberRemoveRequest) (*etcdserverpb.MemberRemoveResponse, error) {
	m, err := c.byID(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	req := &dkvpb.MemberRemoveRequest{Name: m.GetName()}
	resp, err := call(ctx, c.d, dkvpb.Cluster_MemberRemove_FullMethodName, req, func(ctx context.Context) (*dkvpb.MemberRemoveResponse, error) {
		return c.d.Cluster.MemberRemove(ctx, req)
	})
	if err != nil {
		if de, ok := dkvErr(err); ok {
			switch {
			case de.Code == dkverr.NotFound:
				return nil, rpctypes.ErrGRPCMemberNotFound
			case de.Code == dkverr.Conflict && strings.Contains(de.Msg, "quorum"):
				return nil, rpctypes.ErrGRPCMemberNotEnoughStarted
			}
		}
		return nil, toEtcdErr(err)
	}
	return &etcdserverpb.MemberRemoveResponse{Header: toHeader(resp.GetHeader()), Members: c.toMembers(resp.GetMembers())}, nil
}

func (c *clusterServer) MemberPromote(ctx context.Context, r *etcdserverpb.MemberPromoteRequest) (*etcdserverpb.MemberPromoteResponse, error) {
	m, err := c.byID(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	if !m.GetIsLearner() {
		return nil, rpctypes.ErrGRPCMemberNotLearner
	}
	req := &dkvpb.MemberPromoteRequest{Name: m.GetName()}
	resp, err := call(ctx, c.d, dkvpb.Cluster_MemberPromote_FullMethodName, req, func(ctx context.Context) (*dkvpb.MemberPromoteResponse, error) {
		return c.d.Cluster.MemberPromote(ctx, req)
	})
	if err != nil {
		if de, ok := dkvErr(err); ok {
			switch {
			case de.Code == dkverr.NotFound:
				return nil, rpctypes.ErrGRPCMemberNotFound
			case de.Code == dkverr.Conflict && strings.Contains(de.Msg, "already a voter"):
				return nil, rpctypes.ErrGRPCMemberNotLearner
			case de.Code == dkverr.Conflict && strings.Contains(de.Msg, "caught up"):
				return nil, rpctypes.ErrGRPCLearnerNotReady
			}
		}
		return nil, toEtcdErr(err)
	}
	return &etcdserverpb.MemberPromoteResponse{Header: toHeader(resp.GetHeader()), Members: c.toMembers(resp.GetMembers())}, nil
}

// MemberUpdate moves a member to another peer URL through raft (DKV's
// UpdatePeer): it keeps its id, every member dials the new address once
// the change is applied, and the member itself is restarted with the new
// --peer-addr and its data dir. A member that has not started yet cannot
// move (its id at join would be derived from the new address).
func (c *clusterServer) MemberUpdate(ctx context.Context, r *etcdserverpb.MemberUpdateRequest) (*etcdserverpb.MemberUpdateResponse, error) {
	m, err := c.byID(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	addr, err := peerAddr(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	if c.d.UpdatePeer == nil {
		return nil, status.Errorf(codes.Unimplemented, "%smember update is not available", etcdPrefix)
	}
	type result struct {
		h  *dkvpb.ResponseHeader
		ms []*dkvpb.Member
	}
	// Authorized as adding a member at the new address: a membership
	// change, root's.
	req := &dkvpb.MemberAddRequest{Name: m.GetName(), PeerUrl: addr}
	res, err := call(ctx, c.d, dkvpb.Cluster_MemberAdd_FullMethodName, req, func(ctx context.Context) (result, error) {
		h, ms, err := c.d.UpdatePeer(ctx, m.GetId(), addr)
		return result{h, ms}, err
	})
	if err != nil {
		if de, ok := dkvErr(err); ok {
			switch {
			case de.Code == dkverr.NotFound:
				return nil, rpctypes.ErrGRPCMemberNotFound
			case de.Code == dkverr.Conflict && strings.Contains(de.Msg, "already uses peer URL"):
				return nil, rpctypes.ErrGRPCPeerURLExist
			case de.Code == dkverr.Conflict && strings.Contains(de.Msg, "has not started"):
				return nil, status.Errorf(codes.FailedPrecondition, "%s%s", etcdPrefix, de.Msg)
			}
		}
		return nil, toEtcdErr(err)
	}
	return &etcdserverpb.MemberUpdateResponse{Header: toHeader(res.h), Members: c.toMembers(res.ms)}, nil
}
