package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A member that is paused (SIGSTOP, a stuck VM, a long GC) keeps its TCP
// connections open but answers nothing, so gRPC keeps it "ready" and
// requests sent to it wait for their whole deadline. The router notices:
// while an endpoint has requests in flight and has not answered anything
// for a while, the client probes it (a Status call with a short timeout).
// An endpoint that misses its probe is unresponsive: new requests go to
// the other endpoints, the requests in flight on it are given up (a read
// is retried elsewhere; a write, which may already be applied, reports
// ErrUnknownOutcome, never retried), and it is probed until it answers
// again. The same probes tell the client which member leads, so that
// writes go straight to the leader.

// attempt is one request as the router sees it.
type attempt struct {
	write bool // a mutation (or a lease renewal): prefer the leader
	long  bool // may legitimately wait long (lock acquire with wait, streams)
	probe bool // the router's own probe: never tracked or given up
	only  string
	start time.Time
	// cancel gives the attempt up with an *unresponsiveError.
	cancel context.CancelCauseFunc
	// ep is the endpoint it was sent to, once picked.
	ep atomic.Pointer[endpoint]
}

// heard records an answer on the attempt's endpoint (a stream message).
func (a *attempt) heard() {
	if e := a.ep.Load(); e != nil {
		e.heard()
	}
}

// unresponsiveError is the cause of an attempt given up because its
// endpoint stopped answering.
type unresponsiveError struct {
	addr    string
	timeout time.Duration
}

func (e *unresponsiveError) Error() string {
	return fmt.Sprintf("endpoint %s stopped answering (no reply to a status probe within %v)", e.addr, e.timeout)
}

// routes is what the picker reads on every pick.
type routes struct {
	down   map[string]bool
	leader string // the leader's endpoint, "" if unknown or unresponsive
}

type endpoint struct {
	addr      string
	lastHeard atomic.Int64 // unix nanos of the last reply of any kind

	// under router.mu
	inflight  map[*attempt]struct{}
	probing   bool
	lastProbe time.Time
	down      bool
	memberID  uint64
}

func (e *endpoint) heard() { e.lastHeard.Store(time.Now().UnixNano()) }

func (e *endpoint) silentFor(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, e.lastHeard.Load()))
}

type router struct {
	timeout time.Duration // UnresponsiveTimeout
	probe   func(ctx context.Context, addr string) (*dkvpb.StatusResponse, error)

	routes atomic.Pointer[routes]
	conns  atomic.Pointer[[]connInfo] // the balancer's last snapshot
	begun  atomic.Int64               // attempts ever started

	mu         sync.Mutex
	eps        map[string]*endpoint
	leaderID   uint64
	leaderTerm uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRouter(timeout time.Duration, probe func(context.Context, string) (*dkvpb.StatusResponse, error)) *router {
	r := &router{timeout: timeout, probe: probe, eps: map[string]*endpoint{}}
	r.routes.Store(&routes{})
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// start runs the monitor until stop.
func (r *router) start() {
	if r.timeout <= 0 {
		return
	}
	r.wg.Add(1)
	go r.monitor()
}

func (r *router) stop() {
	r.cancel()
	r.wg.Wait()
}

func (r *router) ep(addr string) *endpoint {
	e := r.eps[addr]
	if e == nil {
		e = &endpoint{addr: addr, inflight: map[*attempt]struct{}{}}
		e.heard()
		r.eps[addr] = e
	}
	return e
}

// begin records a picked at addr. up is false when the picker had to use
// an unresponsive endpoint because every connected one is.
func (r *router) begin(a *attempt, addr string, up bool) *endpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.ep(addr)
	if a == nil || a.probe {
		return e
	}
	r.begun.Add(1)
	a.ep.Store(e)
	e.inflight[a] = struct{}{}
	if e.down && up && a.cancel != nil {
		// Picked just as the endpoint was found unresponsive.
		a.cancel(&unresponsiveError{addr: addr, timeout: r.probeTimeout()})
	}
	return e
}

func (r *router) end(a *attempt, e *endpoint) {
	if a == nil || a.probe {
		return
	}
	r.mu.Lock()
	delete(e.inflight, a)
	r.mu.Unlock()
}

// streamAttempt is for a long-lived stream opened with the returned ctx:
// heard records each message received; if the stream's endpoint stops
// answering the router ends the stream (its ctx is cancelled with an
// *unresponsiveError), so that the caller reconnects elsewhere. end must
// be called once the stream is over. A write stream (lease keep-alive:
// every renewal is a raft proposal) is opened on the leader when the
// client knows it and it is connected and answering, like a unary write;
// otherwise on any endpoint, as a watch stream always is.
func (c *Client) streamAttempt(ctx context.Context, write bool) (sctx context.Context, heard, end func()) {
	actx, cancel := context.WithCancelCause(ctx)
	a := &attempt{write: write, long: true, start: time.Now(), cancel: cancel}
	return withAttempt(actx, a), a.heard, func() { cancel(nil) }
}

// probeTimeout: silence of a quarter of the timeout starts a probe, which
// gets the rest.
func (r *router) probeTimeout() time.Duration { return r.timeout - r.timeout/4 }

const (
	// leaderRefresh is how often a busy client re-learns the leader.
	leaderRefresh = 2 * time.Second
	// longProbeGap: endpoints with only long waits in flight (a lock
	// queue, a quiet watch) are probed this many timeouts apart.
	longProbeGap = 2
)

func (r *router) monitor() {
	defer r.wg.Done()
	tick := max(r.timeout/8, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastBegun int64
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		begun := r.begun.Load()
		busy := begun != lastBegun
		lastBegun = begun
		r.mu.Lock()
		for _, e := range r.eps {
			if e.probing {
				continue
			}
			var short, long bool
			for a := range e.inflight {
				if a.long {
					long = true
				} else if now.Sub(a.start) >= r.timeout/4 {
					short = true
				}
			}
			silent := e.silentFor(now)
			sinceProbe := now.Sub(e.lastProbe)
			switch {
			case e.down:
				if sinceProbe < r.timeout/2 {
					continue
				}
			case short && silent >= r.timeout/4:
			case long && silent >= longProbeGap*r.timeout && sinceProbe >= longProbeGap*r.timeout:
			case busy && sinceProbe >= leaderRefresh:
			default:
				continue
			}
			e.probing = true
			e.lastProbe = now
			r.wg.Add(1)
			go r.runProbe(e)
		}
		r.mu.Unlock()
	}
}

func (r *router) runProbe(e *endpoint) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(r.ctx, r.probeTimeout())
	st, err := r.probe(withAttempt(ctx, &attempt{probe: true, only: e.addr}), e.addr)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	e.probing = false
	if r.ctx.Err() != nil {
		return
	}
	code := status.Code(err)
	switch {
	case err == nil:
		e.heard()
		e.memberID = st.GetMemberId()
		if term := st.GetRaftTerm(); term > r.leaderTerm || (term == r.leaderTerm && r.leaderID == 0) {
			r.leaderTerm, r.leaderID = term, st.GetLeaderId()
		}
		e.down = false
	case code == codes.DeadlineExceeded:
		if !e.down {
			e.down = true
			cause := &unresponsiveError{addr: e.addr, timeout: r.probeTimeout()}
			for a := range e.inflight {
				if a.cancel != nil {
					a.cancel(cause)
				}
			}
		}
	case code == codes.Unavailable || code == codes.Canceled:
		// Not connected: gRPC itself fails and avoids it.
	default:
		// Any other answer (an old server without Status) is an answer.
		e.heard()
		e.down = false
	}
	r.publishLocked()
}

func (r *router) publishLocked() {
	rt := &routes{down: map[string]bool{}}
	for addr, e := range r.eps {
		if e.down {
			rt.down[addr] = true
		} else if r.leaderID != 0 && e.memberID == r.leaderID {
			rt.leader = addr
		}
	}
	r.routes.Store(rt)
}

// connSummary describes the endpoints' connections for an error message.
func (r *router) connSummary() string {
	if p := r.conns.Load(); p != nil {
		return connSummary(*p)
	}
	return ""
}

// failures is the last connection error of every endpoint.
func (r *router) failures() string {
	p := r.conns.Load()
	if p == nil {
		return ""
	}
	pk := &picker{all: *p}
	return pk.failures()
}
