package client

import (
	"context"
	"sync"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/protobuf/proto"
)

// All the watches of a Client share one gRPC Watch stream at a time: the
// server multiplexes watches on a stream by watch id, which the client
// picks (never reusing one), so a response for a watch already gone is
// simply dropped. The stream is opened by the first watch that needs one
// and closed when its last watch ends. When it fails, every watch on it
// is told and reopens itself, on a new shared stream, after the last
// revision it delivered (watch.go); a watch the server cancels, or one
// the application stops, leaves the others alone.
//
// The stream must never wait for one slow application: each watch
// queues what arrives for it, and if it falls maxWatchQueue responses
// behind, the client cancels it on the server and, once the application
// has consumed what was queued, resumes it from its revision, as after a
// reconnect.

// maxWatchQueue is how many responses a watch may have waiting before
// it is paused on the server.
var maxWatchQueue = 1024

// errWatchBehind ends a watch's subscription when its queue is full; the
// watch resumes (it is retryable).
var errWatchBehind = &Error{Kind: ErrUnavailable, Msg: "watch fell behind; resuming from its revision"}

type watchMux struct {
	c      *Client
	mu     sync.Mutex
	cur    *watchConn // the stream new watches join; nil if none
	nextID int64
}

// watchConn is one shared stream.
type watchConn struct {
	m     *watchMux
	ready chan struct{} // closed once dialled; then st or err is set
	st    dkvpb.Watch_WatchClient
	err   error
	heard func()
	end   func()

	sendMu sync.Mutex

	// Under m.mu:
	refs   int // watches using or waiting for the stream
	subs   map[int64]*watchSub
	broken error // why the stream failed; nil while it works
}

// watchSub is one watch's registration on a stream.
type watchSub struct {
	id   int64
	conn *watchConn
	ctx  context.Context

	mu       sync.Mutex
	q        []*dkvpb.WatchResponse
	err      error // after q: why the subscription ended
	signal   chan struct{}
	released bool
}

// subscribe registers a new watch id on the shared stream, dialling one
// if needed, and sends req for it. Responses for the id are then read
// with Recv; release ends the subscription.
func (m *watchMux) subscribe(ctx context.Context, req *dkvpb.WatchCreateRequest) (*watchSub, error) {
	m.mu.Lock()
	wc := m.cur
	if wc == nil {
		wc = &watchConn{m: m, ready: make(chan struct{}), subs: map[int64]*watchSub{}}
		m.cur = wc
		go wc.dial()
	}
	wc.refs++
	m.mu.Unlock()
	select {
	case <-wc.ready:
	case <-ctx.Done():
		wc.unref()
		return nil, ctx.Err()
	}
	m.mu.Lock()
	if wc.broken != nil {
		err := wc.broken
		m.mu.Unlock()
		wc.unref()
		return nil, err
	}
	m.nextID++
	s := &watchSub{id: m.nextID, conn: wc, ctx: ctx, signal: make(chan struct{}, 1)}
	wc.subs[s.id] = s
	m.mu.Unlock()
	r := proto.Clone(req).(*dkvpb.WatchCreateRequest)
	r.WatchId = s.id
	if err := wc.send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: r}}); err != nil {
		// The stream is broken; the receiver reports its real error to
		// every subscription, this one included.
		wc.fail(err)
	}
	return s, nil
}

func (wc *watchConn) dial() {
	ctx, heard, end := wc.m.c.streamAttempt(context.Background(), false)
	st, err := dkvpb.NewWatchClient(wc.m.c.cc).Watch(ctx)
	wc.heard, wc.end = heard, end
	if err != nil {
		wc.err = err
		wc.m.mu.Lock()
		wc.breakLocked(err)
		wc.m.mu.Unlock()
		end()
		close(wc.ready)
		return
	}
	wc.st = st
	close(wc.ready)
	go wc.recv()
}

func (wc *watchConn) recv() {
	for {
		r, err := wc.st.Recv()
		if err != nil {
			wc.fail(err)
			return
		}
		wc.heard()
		wc.m.mu.Lock()
		s := wc.subs[r.WatchId]
		if s != nil && !s.push(r) {
			// Fallen behind: stop it on the server; it resumes later.
			delete(wc.subs, s.id)
			go wc.cancel(s.id)
		}
		wc.m.mu.Unlock()
	}
}

func (wc *watchConn) send(r *dkvpb.WatchRequest) error {
	wc.sendMu.Lock()
	defer wc.sendMu.Unlock()
	return wc.st.Send(r)
}

func (wc *watchConn) cancel(id int64) {
	_ = wc.send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CancelRequest{CancelRequest: &dkvpb.WatchCancelRequest{WatchId: id}}})
}

// fail ends the stream: every subscription on it gets err.
func (wc *watchConn) fail(err error) {
	wc.m.mu.Lock()
	wc.breakLocked(err)
	wc.m.mu.Unlock()
	wc.end()
}

func (wc *watchConn) breakLocked(err error) {
	if wc.broken != nil {
		return
	}
	wc.broken = err
	if wc.m.cur == wc {
		wc.m.cur = nil
	}
	for id, s := range wc.subs {
		s.stop(err)
		delete(wc.subs, id)
	}
}

// unref drops one user of the stream and closes the stream after the
// last one.
func (wc *watchConn) unref() {
	wc.m.mu.Lock()
	wc.refs--
	last := wc.refs == 0
	if last {
		if wc.m.cur == wc {
			wc.m.cur = nil
		}
		if wc.broken == nil {
			wc.broken = errStreamIdle
		}
	}
	wc.m.mu.Unlock()
	if !last {
		return
	}
	// The dial may still be under way: close once it is done.
	go func() {
		<-wc.ready
		if wc.st != nil {
			wc.sendMu.Lock()
			_ = wc.st.CloseSend()
			wc.sendMu.Unlock()
		}
		wc.end()
	}()
}

// errStreamIdle marks a stream closed for want of watches; no
// subscription ever sees it.
var errStreamIdle = &Error{Kind: ErrUnavailable, Msg: "watch stream closed: no watches left"}

// push queues r; false if the queue is full (the subscription then ends
// with errWatchBehind after what it holds). Called under m.mu.
func (s *watchSub) push(r *dkvpb.WatchResponse) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return true
	}
	if len(s.q) >= maxWatchQueue {
		s.err = errWatchBehind
		s.wake()
		return false
	}
	s.q = append(s.q, r)
	s.wake()
	return true
}

// stop ends the subscription with err after what it holds.
func (s *watchSub) stop(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	s.wake()
}

func (s *watchSub) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// Recv returns the watch's next response, in the order the server sent
// them, or why the subscription ended, or the watch's ctx error.
func (s *watchSub) Recv() (*dkvpb.WatchResponse, error) {
	for {
		s.mu.Lock()
		if len(s.q) > 0 {
			r := s.q[0]
			s.q[0] = nil
			s.q = s.q[1:]
			s.mu.Unlock()
			return r, nil
		}
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-s.signal:
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		}
	}
}

// release ends the subscription: the server-side watch is cancelled if
// the stream still works, and the stream closes after its last watch.
func (s *watchSub) release() {
	wc := s.conn
	wc.m.mu.Lock()
	if s.released {
		wc.m.mu.Unlock()
		return
	}
	s.released = true
	_, live := wc.subs[s.id]
	delete(wc.subs, s.id)
	alive := live && wc.broken == nil && wc.refs > 1
	wc.m.mu.Unlock()
	if alive {
		go wc.cancel(s.id)
	}
	wc.unref()
}
