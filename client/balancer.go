package client

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// The client's own load balancer keeps one connection per endpoint and
// picks, per request, among those that are connected and not known to be
// unresponsive (see router): a write, or a lease keep-alive stream, goes
// to the leader when the client knows it, anything else round-robin. It also keeps each endpoint's last
// connection error, so that "connection refused" or a DNS failure is what
// the caller sees, at once, when no endpoint can be reached.
const balancerName = "dkv_endpoints"

func init() { balancer.Register(lbBuilder{}) }

// routerKey carries the client's *router in the resolver state's
// attributes to its balancer.
type routerKey struct{}

type lbBuilder struct{}

func (lbBuilder) Name() string { return balancerName }

func (lbBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &lb{cc: cc, subs: map[string]*lbSub{}}
}

type lbSub struct {
	addr  string
	sc    balancer.SubConn
	state connectivity.State
	err   error // the last connection error
}

// lb is called by gRPC serially (its methods and the SubConn state
// listeners never run concurrently), so it needs no lock.
type lb struct {
	cc          balancer.ClientConn
	r           *router
	subs        map[string]*lbSub
	resolverErr error
}

func (b *lb) UpdateClientConnState(s balancer.ClientConnState) error {
	if s.ResolverState.Attributes != nil {
		if r, ok := s.ResolverState.Attributes.Value(routerKey{}).(*router); ok {
			b.r = r
		}
	}
	want := map[string]bool{}
	for _, a := range s.ResolverState.Addresses {
		want[a.Addr] = true
		if _, ok := b.subs[a.Addr]; ok {
			continue
		}
		sub := &lbSub{addr: a.Addr, state: connectivity.Idle}
		// One address per SubConn, as the deprecation notice asks.
		//lint:ignore SA1019 NewSubConn stays the API; it is deprecated only for several addresses per SubConn
		sc, err := b.cc.NewSubConn([]resolver.Address{{Addr: a.Addr, ServerName: a.ServerName}}, balancer.NewSubConnOptions{
			StateListener: func(st balancer.SubConnState) { b.updateSub(sub, st) },
		})
		if err != nil {
			continue
		}
		sub.sc = sc
		b.subs[a.Addr] = sub
		sc.Connect()
	}
	for addr, sub := range b.subs {
		if !want[addr] {
			sub.sc.Shutdown()
			delete(b.subs, addr)
		}
	}
	if len(s.ResolverState.Addresses) == 0 {
		b.ResolverError(errors.New("no endpoints"))
		return balancer.ErrBadResolverState
	}
	b.resolverErr = nil
	b.publish()
	return nil
}

func (b *lb) ResolverError(err error) {
	b.resolverErr = err
	b.publish()
}

func (b *lb) updateSub(sub *lbSub, st balancer.SubConnState) {
	if b.subs[sub.addr] != sub {
		return // removed
	}
	switch st.ConnectivityState {
	case connectivity.Shutdown:
		return
	case connectivity.Idle:
		// The connection closed (server restart, GOAWAY): reconnect.
		sub.sc.Connect()
		if sub.state == connectivity.TransientFailure {
			return
		}
	case connectivity.Connecting:
		// An endpoint that failed stays failed until it connects, so that
		// "every endpoint failed" is a state, not a flicker.
		if sub.state == connectivity.TransientFailure {
			return
		}
	case connectivity.TransientFailure:
		sub.err = st.ConnectionError
	}
	sub.state = st.ConnectivityState
	b.publish()
}

func (b *lb) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {} // StateListener is used

func (b *lb) ExitIdle() {
	for _, sub := range b.subs {
		sub.sc.Connect()
	}
}

func (b *lb) Close() {}

// connInfo is a snapshot of one endpoint's connection.
type connInfo struct {
	addr  string
	sc    balancer.SubConn
	state connectivity.State
	err   error
}

func (b *lb) publish() {
	p := &picker{r: b.r, byAddr: map[string]connInfo{}, resolverErr: b.resolverErr}
	p.next.Store(uint32(len(b.subs))) // any start; spreads first picks a little
	anyPending := false
	for _, sub := range b.subs {
		ci := connInfo{addr: sub.addr, sc: sub.sc, state: sub.state, err: sub.err}
		p.all = append(p.all, ci)
		p.byAddr[sub.addr] = ci
		switch sub.state {
		case connectivity.Ready:
			p.ready = append(p.ready, ci)
		case connectivity.Idle, connectivity.Connecting:
			anyPending = true
		}
	}
	slices.SortFunc(p.all, func(a, b connInfo) int { return strings.Compare(a.addr, b.addr) })
	slices.SortFunc(p.ready, func(a, b connInfo) int { return strings.Compare(a.addr, b.addr) })
	state := connectivity.TransientFailure
	switch {
	case len(p.ready) > 0:
		state = connectivity.Ready
	case anyPending:
		state = connectivity.Connecting
	}
	p.state = state
	if b.r != nil {
		b.r.conns.Store(&p.all)
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: state, Picker: p})
}

type picker struct {
	r           *router
	all, ready  []connInfo
	byAddr      map[string]connInfo
	state       connectivity.State
	resolverErr error
	next        atomic.Uint32
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	a := attemptFrom(info.Ctx)
	if a != nil && a.only != "" {
		ci, ok := p.byAddr[a.only]
		switch {
		case !ok:
			return balancer.PickResult{}, status.Errorf(codes.Unavailable, "endpoint %s is not one of the client's endpoints", a.only)
		case ci.state == connectivity.Ready:
			return p.result(a, ci, true), nil
		case ci.state == connectivity.TransientFailure:
			return balancer.PickResult{}, status.Errorf(codes.Unavailable, "endpoint %s: %s", ci.addr, connErrText(ci.err))
		case a.probe:
			return balancer.PickResult{}, status.Errorf(codes.Unavailable, "endpoint %s: not connected", ci.addr)
		}
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	if len(p.ready) == 0 {
		if p.state == connectivity.TransientFailure {
			// A plain error: requests that wait for ready keep waiting,
			// the others fail with Unavailable and this text.
			return balancer.PickResult{}, errors.New(p.failures())
		}
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	cands := p.ready
	var rt *routes
	if p.r != nil {
		rt = p.r.routes.Load()
	}
	up := true
	if rt != nil && len(rt.down) > 0 {
		var ok []connInfo
		for _, ci := range p.ready {
			if !rt.down[ci.addr] {
				ok = append(ok, ci)
			}
		}
		if len(ok) > 0 {
			cands = ok
		} else {
			up = false // every connected endpoint is unresponsive: try anyway
		}
	}
	if a != nil && a.write && rt != nil && rt.leader != "" {
		for _, ci := range cands {
			if ci.addr == rt.leader {
				return p.result(a, ci, up), nil
			}
		}
	}
	ci := cands[int(p.next.Add(1)%uint32(len(cands)))]
	return p.result(a, ci, up), nil
}

// result tracks the request on its endpoint (router.begin) until gRPC
// reports it done.
func (p *picker) result(a *attempt, ci connInfo, up bool) balancer.PickResult {
	r := p.r
	if r == nil {
		return balancer.PickResult{SubConn: ci.sc}
	}
	e := r.begin(a, ci.addr, up)
	return balancer.PickResult{SubConn: ci.sc, Done: func(di balancer.DoneInfo) {
		if di.BytesReceived {
			e.heard()
		}
		r.end(a, e)
	}}
}

// failures lists every endpoint's last connection error.
func (p *picker) failures() string {
	var parts []string
	for _, ci := range p.all {
		parts = append(parts, ci.addr+": "+connErrText(ci.err))
	}
	if len(parts) == 0 && p.resolverErr != nil {
		return p.resolverErr.Error()
	}
	return strings.Join(parts, "; ")
}

// connErrText is the useful part of a gRPC connection error: the dial
// error ("dial tcp 127.0.0.1:1: connect: connection refused", "lookup
// nosuch.example: no such host") rather than gRPC's wrapping of it.
func connErrText(err error) string {
	if err == nil {
		return "not connected"
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Error()
	}
	return err.Error()
}

// connSummary describes every endpoint's connection, for errors.
func connSummary(all []connInfo) string {
	var parts []string
	for _, ci := range all {
		switch ci.state {
		case connectivity.Ready:
			parts = append(parts, ci.addr+": connected")
		case connectivity.TransientFailure:
			parts = append(parts, ci.addr+": "+connErrText(ci.err))
		default:
			parts = append(parts, ci.addr+": still connecting")
		}
	}
	return strings.Join(parts, "; ")
}

type attemptKey struct{}

func withAttempt(ctx context.Context, a *attempt) context.Context {
	return context.WithValue(ctx, attemptKey{}, a)
}

func attemptFrom(ctx context.Context) *attempt {
	if ctx == nil {
		return nil
	}
	a, _ := ctx.Value(attemptKey{}).(*attempt)
	return a
}
