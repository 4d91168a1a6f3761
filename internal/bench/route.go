package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// Routing of a run's requests (Options.Route).
const (
	// RouteLeader sends every write (and every lease keep-alive stream)
	// over connections to the member that leads when the run starts, as
	// DKV's Go client does once it knows the leader; reads and watches
	// stay spread over the endpoints.
	RouteLeader = "leader"
	// RouteSpread spreads every connection over the endpoints
	// round-robin; a write that reaches a follower is forwarded by it to
	// the leader. It is what etcd's clientv3 does (each client talks to
	// one member).
	RouteSpread = "spread"
)

// leaderProbeTimeout bounds the setup's questions about who leads.
const leaderProbeTimeout = 3 * time.Second

// leaderWait is how long the setup asks again while every member that
// answers knows no leader (an election in progress, as right after a
// cluster starts) before it spreads writes instead. Without it a run
// started moments after `dkv dev-cluster` spread writes for its whole
// length, and measured something else than its pair.
const leaderWait = 10 * time.Second

// errNoLeader: the members answered, and none knows a leader.
var errNoLeader = errors.New("no member knows a leader")

// leaderEndpoint finds the client address of the member that leads, with
// the public Cluster API only: Status on every endpoint tells each
// member's id and the leader's id (the newest term wins); the endpoint
// whose member is the leader is the answer. When no endpoint given is the
// leader (e.g. one follower's address), the leader's advertised client
// URL from MemberList is. dial opens a connection; the caller closes
// nothing (the probes' connections are closed here).
func leaderEndpoint(ctx context.Context, endpoints []string, dial func(context.Context, string) (*grpc.ClientConn, error), timeout time.Duration) (string, error) {
	type answer struct {
		ep   string
		st   *dkvpb.StatusResponse
		conn *grpc.ClientConn
		err  error
	}
	answers := make([]answer, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i].ep = ep
			conn, err := dial(ctx, ep)
			if err != nil {
				answers[i].err = err
				return
			}
			answers[i].conn = conn
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			answers[i].st, answers[i].err = dkvpb.NewClusterClient(conn).Status(sctx, &dkvpb.StatusRequest{})
		}()
	}
	wg.Wait()
	defer func() {
		for _, a := range answers {
			if a.conn != nil {
				a.conn.Close()
			}
		}
	}()
	var (
		leaderID, term uint64
		asked          *grpc.ClientConn // a member that answered
		errs           []error
	)
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.ep, a.err))
			continue
		}
		asked = a.conn
		if t := a.st.GetRaftTerm(); a.st.GetLeaderId() != 0 && (t > term || leaderID == 0) {
			leaderID, term = a.st.GetLeaderId(), t
		}
	}
	if leaderID == 0 {
		if len(errs) > 0 {
			return "", fmt.Errorf("no member answered with a leader: %w", errors.Join(errs...))
		}
		return "", errNoLeader
	}
	for _, a := range answers {
		if a.err == nil && a.st.GetMemberId() == leaderID {
			return a.ep, nil
		}
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ml, err := dkvpb.NewClusterClient(asked).MemberList(lctx, &dkvpb.MemberListRequest{})
	if err != nil {
		return "", fmt.Errorf("leader %x is none of the endpoints, and the member list failed: %w", leaderID, err)
	}
	for _, m := range ml.GetMembers() {
		if m.GetId() == leaderID && m.GetClientUrl() != "" {
			return m.GetClientUrl(), nil
		}
	}
	return "", fmt.Errorf("leader %x is none of the endpoints and has no client URL in the member list", leaderID)
}

// dialWrites opens the connections writes use. With RouteLeader and a
// leader found, Conns connections to it; otherwise (spread, or the leader
// could not be found: said on o.Warn) the read connections themselves.
// It returns the routing used and the leader's endpoint ("" if none).
func dialWrites(ctx context.Context, o *Options, dial func(context.Context, string) (*grpc.ClientConn, error), reads []*grpc.ClientConn) (conns []*grpc.ClientConn, route, leader string, err error) {
	if o.Route == RouteSpread {
		return reads, RouteSpread, "", nil
	}
	timeout := leaderProbeTimeout
	if o.OpTimeout > 0 {
		timeout = min(timeout, o.OpTimeout)
	}
	leader, lerr := leaderEndpoint(ctx, o.Endpoints, dial, timeout)
	for wait := time.Now().Add(leaderWait); errors.Is(lerr, errNoLeader) && time.Now().Before(wait); {
		select {
		case <-ctx.Done():
			return nil, "", "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		leader, lerr = leaderEndpoint(ctx, o.Endpoints, dial, timeout)
	}
	if lerr != nil {
		if o.Warn != nil {
			fmt.Fprintf(o.Warn, "route leader: the leader could not be found (%v); spreading writes over the endpoints instead\n", lerr)
		}
		return reads, RouteSpread, "", nil
	}
	conns = make([]*grpc.ClientConn, o.Conns)
	for i := range conns {
		c, err := dial(ctx, leader)
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, "", "", fmt.Errorf("dial leader %s: %w", leader, err)
		}
		conns[i] = c
	}
	return conns, RouteLeader, leader, nil
}
