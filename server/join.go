package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
)

// publishClientURL records this member's client URL and server version
// in the member table if either is missing or changed, so clients can
// discover every member and operators see which version each runs. A
// proposal that fails (no leader for a while, a busy cluster) is tried
// again until the table shows them or the server stops: a member left
// unpublished could not be forwarded to when it leads.
func (s *Server) publishClientURL() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// Stopping the server ends an attempt under way.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stopc:
				cancel()
			case <-ctx.Done():
			}
		}()
		backoff := 100 * time.Millisecond
		for !s.published() {
			err := s.publishOnce(ctx)
			if err == nil {
				return
			}
			s.log.Warn("publish client url and version; retrying", "err", err, "in", backoff)
			select {
			case <-s.stopc:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
}

// published reports whether the member table holds this member's
// client URL and version.
func (s *Server) published() bool {
	ms, err := s.sm.Latest().Members()
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.GetId() == s.memberID {
			return m.GetClientUrl() == s.advClient && m.GetVersion() == Version
		}
	}
	// Not in the table (removed): there is nothing to publish to.
	return true
}

// publishAttempt bounds one proposal of publishClientURL: one lost on
// the way to the leader is never answered.
const publishAttempt = 5 * time.Second

func (s *Server) publishOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, publishAttempt)
	defer cancel()
	req := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_MemberAttrs{MemberAttrs: &dkvpb.MemberAttrsRequest{Id: s.memberID, ClientUrl: s.advClient, Version: Version}}}
	_, err := s.proposeRequest(ctx, req)
	return err
}

// joinTimeout bounds the attempt to join through one --join endpoint.
const joinTimeout = 15 * time.Second

// joinCluster asks a running member (cfg.Join) to add this node as a
// learner, and learns the cluster id and the members' peer addresses.
// The peer secret is not among them: the operator gives it
// (--initial-cluster-token, --peer-secret-file). An endpoint that refuses the connection fails at once
// (nothing listens there); one that does not answer fails after
// joinTimeout; ctx (the caller's, e.g. SIGTERM) ends the attempt at any
// point.
func (s *Server) joinCluster(ctx context.Context) (memberID, clusterID uint64, members []*dkvpb.Member, err error) {
	memberID = MemberID(s.cfg.Name, s.advPeer)
	var errs []string
	for _, ep := range s.cfg.Join {
		jctx, cancel := context.WithTimeout(ctx, joinTimeout)
		members, clusterID, err = s.joinVia(jctx, ep, memberID)
		expired := jctx.Err() != nil
		cancel()
		if err == nil {
			return memberID, clusterID, members, nil
		}
		if ctx.Err() != nil {
			return 0, 0, nil, fmt.Errorf("join via %s: %w", ep, ctx.Err())
		}
		if expired {
			err = fmt.Errorf("no answer within %v: %w", joinTimeout, err)
		}
		errs = append(errs, fmt.Sprintf("via %s: %v", ep, err))
	}
	return 0, 0, nil, fmt.Errorf("joining the cluster failed: %s", strings.Join(errs, "; "))
}

// joinVia asks the member at ep to add this one.
func (s *Server) joinVia(ctx context.Context, ep string, memberID uint64) ([]*dkvpb.Member, uint64, error) {
	conn, err := grpc.NewClient("passthrough:///"+ep, s.memberDialCreds())
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	cc := dkvpb.NewClusterClient(conn)
	// Not WaitForReady: a refused connection is reported at once instead
	// of being retried until the deadline.
	list, err := cc.MemberList(ctx, &dkvpb.MemberListRequest{Linearizable: true})
	if err != nil {
		return nil, 0, dkverr.FromGRPC(err)
	}
	if err := checkVersions(Version, memberID, list.GetMembers()); err != nil {
		return nil, 0, err
	}
	for _, m := range list.GetMembers() {
		if m.GetId() == memberID {
			// Already added (by an operator, or an earlier try).
			return list.GetMembers(), list.GetHeader().GetClusterId(), nil
		}
		if m.GetName() == s.cfg.Name {
			return nil, 0, fmt.Errorf("cluster already has a member named %q with peer URL %s", m.GetName(), m.GetPeerUrl())
		}
	}
	resp, err := cc.MemberAdd(ctx, &dkvpb.MemberAddRequest{Name: s.cfg.Name, PeerUrl: s.advPeer, IsLearner: true})
	if err != nil {
		return nil, 0, dkverr.FromGRPC(err)
	}
	return resp.GetMembers(), resp.GetHeader().GetClusterId(), nil
}
