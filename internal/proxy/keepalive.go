package proxy

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/keepalive"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Lease keep-alives: the local KeepAlive streams of DKV's Lease service
// whose callers present the same metadata share one upstream KeepAlive
// stream.
//
// Invariants:
//
//   - A local request to renew a lease is answered with the cluster's
//     result for that lease, to an upstream request sent after the local
//     one arrived: the TTL a client gets is one the cluster granted after
//     it asked, never an earlier answer or a made-up one. Local requests
//     for a lease that arrive while one is in flight wait for the next.
//   - Only callers with identical metadata share a stream, so the member
//     checks every renewal with the token that asked for it.
//   - When the upstream stream fails with an error a member would end
//     a direct stream with for good (not Unavailable and the like), every
//     local stream on it ends with that error; otherwise the proxy opens a
//     new upstream stream and asks again for every lease still waiting.

// maxLocalKeepAliveQueue is how many responses a local keep-alive stream
// may have waiting before it is ended (its client reconnects).
const maxLocalKeepAliveQueue = 1024

type kaHub struct {
	p  *Proxy
	mu sync.Mutex
	up map[string]*kaUpstream // by identity

	local, upstream atomic.Int64 // the metrics
}

// kaUpstream is one upstream KeepAlive stream and the local streams
// that share it.
type kaUpstream struct {
	h      *kaHub
	ident  string
	md     metadata.MD
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	locals map[*kaLocal]struct{}
	leases map[int64]*kaLease
	st     dkvpb.Lease_KeepAliveClient // nil while reconnecting
}

// kaLease is a lease with a renewal in flight upstream.
type kaLease struct {
	waiting map[*kaLocal]struct{} // answered by the in-flight request
	next    map[*kaLocal]struct{} // asked after it was sent
}

type kaLocal struct {
	out chan *dkvpb.LeaseKeepAliveResponse
	mu  sync.Mutex
	err error
	end chan struct{} // closed with err set

	// Under the upstream's mu:
	pending    int  // answers it still waits for
	halfClosed bool // it sends no more requests: it ends once pending is 0
}

func (l *kaLocal) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
		close(l.end)
	}
}

func (l *kaLocal) deliver(r *dkvpb.LeaseKeepAliveResponse) {
	select {
	case l.out <- r:
	default:
		l.fail(status.Error(codes.Unavailable, "the keep-alive stream fell behind the proxy; reconnect"))
	}
}

// keepAlive serves one local KeepAlive stream.
func (h *kaHub) keepAlive(ss grpc.ServerStream) error {
	md := passMD(ss.Context())
	ident := identity(md)
	l := &kaLocal{out: make(chan *dkvpb.LeaseKeepAliveResponse, maxLocalKeepAliveQueue), end: make(chan struct{})}
	u := h.join(ident, md, l)
	defer u.leave(l)
	h.local.Add(1)
	defer h.local.Add(-1)
	go func() {
		for {
			req := new(dkvpb.LeaseKeepAliveRequest)
			if err := ss.RecvMsg(req); err != nil {
				if err == io.EOF {
					// As on a member: the answers in flight are sent,
					// then the stream ends.
					u.halfClose(l)
					return
				}
				l.fail(err)
				return
			}
			// Refused here, as a member would, before it can end a
			// stream other clients share.
			if err := keepalive.ValidIDs(req.Ids); err != nil {
				l.fail(err)
				return
			}
			u.ask(l, req.Ids)
		}
	}()
	for {
		select {
		case r := <-l.out:
			if err := ss.SendMsg(r); err != nil {
				return err
			}
		case <-l.end:
			for len(l.out) > 0 { // this goroutine alone takes from out
				if err := ss.SendMsg(<-l.out); err != nil {
					return err
				}
			}
			if l.err == io.EOF {
				return nil
			}
			return l.err
		case <-ss.Context().Done():
			return ss.Context().Err()
		case <-h.p.ctx.Done():
			return status.Error(codes.Unavailable, "the proxy is stopping")
		}
	}
}

// join adds l to the upstream stream of ident, starting one if needed.
func (h *kaHub) join(ident string, md metadata.MD, l *kaLocal) *kaUpstream {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.up[ident]
	if u == nil {
		u = &kaUpstream{h: h, ident: ident, md: md, locals: map[*kaLocal]struct{}{}, leases: map[int64]*kaLease{}}
		u.ctx, u.cancel = context.WithCancel(h.p.ctx)
		h.up[ident] = u
		h.upstream.Add(1)
		h.p.wg.Add(1)
		go u.run()
	}
	u.mu.Lock()
	u.locals[l] = struct{}{}
	u.mu.Unlock()
	return u
}

// leave takes l off u; the last one out ends the upstream stream.
func (u *kaUpstream) leave(l *kaLocal) {
	l.fail(io.EOF) // nothing more is delivered to it
	h := u.h
	h.mu.Lock()
	defer h.mu.Unlock()
	u.mu.Lock()
	delete(u.locals, l)
	last := len(u.locals) == 0
	u.mu.Unlock()
	if last {
		if h.up[u.ident] == u {
			delete(h.up, u.ident)
		}
		u.cancel()
	}
}

func (u *kaUpstream) halfClose(l *kaLocal) {
	u.mu.Lock()
	defer u.mu.Unlock()
	l.halfClosed = true
	if l.pending == 0 {
		l.fail(io.EOF)
	}
}

// ask registers l's request to renew ids and sends upstream the ones
// with no renewal in flight.
func (u *kaUpstream) ask(l *kaLocal, ids []int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var send []int64
	for _, id := range ids {
		le := u.leases[id]
		switch {
		case le == nil:
			u.leases[id] = &kaLease{waiting: map[*kaLocal]struct{}{l: {}}, next: map[*kaLocal]struct{}{}}
			send = append(send, id)
			l.pending++
		default:
			// Even if l waits for the request in flight: that one was
			// sent before l asked again.
			if _, ok := le.next[l]; !ok {
				le.next[l] = struct{}{}
				l.pending++
			}
		}
	}
	u.sendLocked(send)
}

// sendLocked sends a renewal of ids on the current stream; without one,
// the next stream sends every lease waiting.
func (u *kaUpstream) sendLocked(ids []int64) {
	for len(ids) > 0 && u.st != nil {
		n := min(len(ids), keepalive.MaxIDs)
		// A failed send shows on the stream's Recv, and the next stream
		// asks again.
		u.st.Send(&dkvpb.LeaseKeepAliveRequest{Ids: ids[:n]})
		ids = ids[n:]
	}
}

// answer hands the results of one upstream response to the local
// streams that were waiting for them, and asks again for the leases that
// local streams asked for since.
func (u *kaUpstream) answer(resp *dkvpb.LeaseKeepAliveResponse) {
	u.mu.Lock()
	defer u.mu.Unlock()
	per := map[*kaLocal][]*dkvpb.LeaseKeepAliveResult{}
	var again []int64
	for _, r := range resp.Results {
		le := u.leases[r.Id]
		if le == nil {
			continue
		}
		for l := range le.waiting {
			per[l] = append(per[l], r)
		}
		for l := range le.next {
			if _, ok := u.locals[l]; !ok {
				delete(le.next, l)
			}
		}
		if len(le.next) == 0 {
			delete(u.leases, r.Id)
			continue
		}
		le.waiting, le.next = le.next, map[*kaLocal]struct{}{}
		again = append(again, r.Id)
	}
	for l, rs := range per {
		if _, ok := u.locals[l]; ok {
			l.deliver(&dkvpb.LeaseKeepAliveResponse{Header: resp.Header, Results: rs})
			l.pending -= len(rs)
			if l.halfClosed && l.pending == 0 {
				l.fail(io.EOF)
			}
		}
	}
	u.sendLocked(again)
}

// run keeps the upstream stream open while local streams share it.
func (u *kaUpstream) run() {
	defer u.h.p.wg.Done()
	defer u.h.upstream.Add(-1)
	var b backoff
	for {
		answered, err := u.stream()
		if u.ctx.Err() != nil {
			return
		}
		if !retryable(err) {
			u.endAll(err)
			return
		}
		if answered {
			b.reset()
		}
		if !sleep(u.ctx, b.next()) {
			return
		}
	}
}

// endAll ends every local stream of u with err, as a member ends a
// direct stream, and retires u.
func (u *kaUpstream) endAll(err error) {
	h := u.h
	h.mu.Lock()
	if h.up[u.ident] == u {
		delete(h.up, u.ident)
	}
	h.mu.Unlock()
	u.mu.Lock()
	for l := range u.locals {
		l.fail(err)
	}
	u.mu.Unlock()
	u.cancel()
}

// stream runs one upstream stream: every lease waiting is asked for
// again (what was in flight on a broken stream may never be answered).
func (u *kaUpstream) stream() (bool, error) {
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(u.ctx, u.md))
	defer cancel()
	st, err := dkvpb.NewLeaseClient(u.h.p.conn).KeepAlive(ctx)
	if err != nil {
		return false, err
	}
	u.mu.Lock()
	u.st = st
	ids := make([]int64, 0, len(u.leases))
	for id, le := range u.leases {
		for l := range le.next {
			if _, ok := le.waiting[l]; ok {
				l.pending-- // one answer now serves both requests
			}
			le.waiting[l] = struct{}{}
		}
		clear(le.next)
		ids = append(ids, id)
	}
	u.sendLocked(ids)
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.st = nil
		u.mu.Unlock()
	}()
	answered := false
	for {
		resp, err := st.Recv()
		if err != nil {
			return answered, err
		}
		answered = true
		u.answer(resp)
	}
}
