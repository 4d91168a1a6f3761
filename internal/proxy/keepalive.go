package proxy

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/keepalive"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Lease keep-alives: the local KeepAlive streams of DKV's Lease service
// whose callers present the same metadata share one upstream KeepAlive
// stream; so do etcd's Lease.LeaseKeepAlive streams, on an upstream
// LeaseKeepAlive stream of their own (kaKind: DKV's request names many
// leases and its response answers many, etcd's one each).
//
// Invariants:
//
//   - A local request to renew a lease is answered with the cluster's
//     result for that lease, to an upstream request sent after the local
//     one arrived: the TTL a client gets is one the cluster granted after
//     it asked, never an earlier answer or a made-up one (etcd's answer,
//     TTL 0 for a lease not found included, is passed on as the member
//     sent it). Local requests for a lease that arrive while one is in
//     flight wait for the next.
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
	up map[string]*kaUpstream // by kind and identity

	local, upstream atomic.Int64 // the metrics
}

// kaUpstream is one upstream KeepAlive stream and the local streams
// that share it.
type kaUpstream struct {
	h      *kaHub
	kind   kaKind
	ident  string // the hub's key: kind and identity
	md     metadata.MD
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	locals map[*kaLocal]struct{}
	leases map[int64]*kaLease
	st     kaStream // nil while reconnecting
}

// kaKind is the keep-alive protocol of a stream.
type kaKind int

const (
	kaDKV  kaKind = iota // DKV's Lease.KeepAlive
	kaEtcd               // etcd's Lease.LeaseKeepAlive
)

// kaResult is the cluster's answer for one lease: a result of DKV's
// response, or etcd's whole response (it answers one lease).
type kaResult struct {
	id   int64
	dkv  *dkvpb.LeaseKeepAliveResult
	etcd *etcdserverpb.LeaseKeepAliveResponse
}

// kaStream is an upstream keep-alive stream of either kind.
type kaStream interface {
	// send asks for renewals of ids; a failure shows on recv.
	send(ids []int64)
	// recv is the next upstream response: its header (DKV's) and its
	// results.
	recv() (*dkvpb.ResponseHeader, []kaResult, error)
}

type dkvKAStream struct{ st dkvpb.Lease_KeepAliveClient }

func (s dkvKAStream) send(ids []int64) {
	for len(ids) > 0 {
		n := min(len(ids), keepalive.MaxIDs)
		s.st.Send(&dkvpb.LeaseKeepAliveRequest{Ids: ids[:n]})
		ids = ids[n:]
	}
}

func (s dkvKAStream) recv() (*dkvpb.ResponseHeader, []kaResult, error) {
	resp, err := s.st.Recv()
	if err != nil {
		return nil, nil, err
	}
	rs := make([]kaResult, len(resp.Results))
	for i, r := range resp.Results {
		rs[i] = kaResult{id: r.Id, dkv: r}
	}
	return resp.Header, rs, nil
}

type etcdKAStream struct {
	st etcdserverpb.Lease_LeaseKeepAliveClient
}

func (s etcdKAStream) send(ids []int64) {
	for _, id := range ids {
		s.st.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: id})
	}
}

func (s etcdKAStream) recv() (*dkvpb.ResponseHeader, []kaResult, error) {
	resp, err := s.st.Recv()
	if err != nil {
		return nil, nil, err
	}
	return nil, []kaResult{{id: resp.ID, etcd: resp}}, nil
}

// open opens an upstream keep-alive stream of kind k.
func (k kaKind) open(ctx context.Context, conn grpc.ClientConnInterface) (kaStream, error) {
	if k == kaEtcd {
		st, err := etcdserverpb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
		return etcdKAStream{st}, err
	}
	st, err := dkvpb.NewLeaseClient(conn).KeepAlive(ctx)
	return dkvKAStream{st}, err
}

// recvLocal reads a local stream's next request: the leases it asks to
// renew. DKV's are checked as a member checks them, before they can end
// a stream other clients share; etcd's need no check (a member answers
// an id that names no lease with TTL 0, whatever the id).
func (k kaKind) recvLocal(ss grpc.ServerStream) ([]int64, error) {
	if k == kaEtcd {
		req := new(etcdserverpb.LeaseKeepAliveRequest)
		if err := ss.RecvMsg(req); err != nil {
			return nil, err
		}
		return []int64{req.ID}, nil
	}
	req := new(dkvpb.LeaseKeepAliveRequest)
	if err := ss.RecvMsg(req); err != nil {
		return nil, err
	}
	if err := keepalive.ValidIDs(req.Ids); err != nil {
		return nil, err
	}
	return req.Ids, nil
}

// deliverTo sends l the results rs of one upstream response with
// header: DKV's in one response, etcd's each as the member sent it.
func (k kaKind) deliverTo(l *kaLocal, header *dkvpb.ResponseHeader, rs []kaResult) {
	if k == kaEtcd {
		for _, r := range rs {
			l.deliver(r.etcd)
		}
		return
	}
	out := &dkvpb.LeaseKeepAliveResponse{Header: header, Results: make([]*dkvpb.LeaseKeepAliveResult, len(rs))}
	for i, r := range rs {
		out.Results[i] = r.dkv
	}
	l.deliver(out)
}

// kaLease is a lease with a renewal in flight upstream.
type kaLease struct {
	waiting map[*kaLocal]struct{} // answered by the in-flight request
	next    map[*kaLocal]struct{} // asked after it was sent
}

type kaLocal struct {
	out chan proto.Message
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

func (l *kaLocal) deliver(r proto.Message) {
	select {
	case l.out <- r:
	default:
		l.fail(status.Error(codes.Unavailable, "the keep-alive stream fell behind the proxy; reconnect"))
	}
}

// keepAlive serves one local keep-alive stream of kind k.
func (h *kaHub) keepAlive(ss grpc.ServerStream, k kaKind) error {
	md := passMD(ss.Context())
	ident := fmt.Sprint(int(k)) + "\x00" + identity(md)
	l := &kaLocal{out: make(chan proto.Message, maxLocalKeepAliveQueue), end: make(chan struct{})}
	u := h.join(k, ident, md, l)
	defer u.leave(l)
	h.local.Add(1)
	defer h.local.Add(-1)
	go func() {
		for {
			ids, err := k.recvLocal(ss)
			if err != nil {
				if err == io.EOF {
					// As on a member: the answers in flight are sent,
					// then the stream ends.
					u.halfClose(l)
					return
				}
				l.fail(err)
				return
			}
			u.ask(l, ids)
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
func (h *kaHub) join(k kaKind, ident string, md metadata.MD, l *kaLocal) *kaUpstream {
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.up[ident]
	if u == nil {
		u = &kaUpstream{h: h, kind: k, ident: ident, md: md, locals: map[*kaLocal]struct{}{}, leases: map[int64]*kaLease{}}
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
	if len(ids) > 0 && u.st != nil {
		// A failed send shows on the stream's recv, and the next stream
		// asks again.
		u.st.send(ids)
	}
}

// answer hands the results of one upstream response to the local
// streams that were waiting for them, and asks again for the leases that
// local streams asked for since.
func (u *kaUpstream) answer(header *dkvpb.ResponseHeader, results []kaResult) {
	u.mu.Lock()
	defer u.mu.Unlock()
	per := map[*kaLocal][]kaResult{}
	var again []int64
	for _, r := range results {
		le := u.leases[r.id]
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
			delete(u.leases, r.id)
			continue
		}
		le.waiting, le.next = le.next, map[*kaLocal]struct{}{}
		again = append(again, r.id)
	}
	for l, rs := range per {
		if _, ok := u.locals[l]; ok {
			u.kind.deliverTo(l, header, rs)
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
	st, err := u.kind.open(ctx, u.h.p.conn)
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
		header, results, err := st.recv()
		if err != nil {
			return answered, err
		}
		answered = true
		u.answer(header, results)
	}
}
