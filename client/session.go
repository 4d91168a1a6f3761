package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Exactly-once writes. The client opens a session with the cluster (an
// id it picks at random, KV.SessionOpen) and numbers its writes in it;
// the state machine keeps the reply to each (session, sequence) and
// answers one sent again with that reply instead of applying it again.
// So a write whose outcome is unknown (the leader died, the connection
// broke after sending, the member stopped answering) is sent again with
// the same sequence, to any member, until it gets an answer or the
// caller's ctx ends: ErrUnknownOutcome remains only for the latter.
//
// A session expires once unused for Config.SessionTTL. A write refused
// because its session expired was not applied: the client opens a new
// session and sends it again, unless an earlier attempt of it may have
// applied (it was sent in the old session and its outcome was never
// learnt), in which case the caller gets ErrUnknownOutcome wrapping
// ErrSessionExpired. That happens only to a client cut off from the
// cluster for longer than the TTL while it kept retrying.

// DefaultSessionTTL is Config.SessionTTL's default.
const DefaultSessionTTL = 2 * time.Minute

// session is the client's current session and its writes in flight.
type session struct {
	mu       sync.Mutex
	id       uint64 // 0: none open
	last     uint64 // the last sequence handed out in session id
	inflight map[uint64]struct{}
	opening  chan struct{} // closed when the open in progress ends
	// offUntil: the cluster offered no sessions (a member of an older
	// version, or not all members have started); writes go without one
	// until then, and the client asks again after.
	offUntil time.Time
}

// sessionsRetry is how long the client writes without a session after
// the cluster said it has none.
const sessionsRetry = time.Second

// errNoSessions: the cluster does not offer sessions now.
var errNoSessions = errors.New("the cluster offers no client sessions")

// begin returns the session and a sequence for a new write, opening a
// session first if there is none.
func (c *Client) beginOnce(ctx context.Context) (id, seq uint64, err error) {
	s := &c.sess
	for {
		s.mu.Lock()
		if time.Now().Before(s.offUntil) {
			s.mu.Unlock()
			return 0, 0, errNoSessions
		}
		if s.id != 0 {
			s.last++
			seq = s.last
			s.inflight[seq] = struct{}{}
			id = s.id
			s.mu.Unlock()
			return id, seq, nil
		}
		if ch := s.opening; ch != nil {
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
		ch := make(chan struct{})
		s.opening = ch
		s.mu.Unlock()
		id, err := c.openSession(ctx)
		s.mu.Lock()
		s.opening = nil
		close(ch)
		if errors.Is(err, errNoSessions) {
			s.offUntil = time.Now().Add(sessionsRetry)
		}
		if err != nil {
			s.mu.Unlock()
			return 0, 0, err
		}
		s.id, s.last, s.inflight = id, 0, map[uint64]struct{}{}
		s.mu.Unlock()
	}
}

// acked is the lowest sequence in session id still waiting for its reply
// (seq, its caller's, is among them).
func (c *Client) ackedOnce(id, seq uint64) uint64 {
	s := &c.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != id {
		return seq
	}
	low := seq
	for q := range s.inflight {
		low = min(low, q)
	}
	return low
}

// endOnce marks the write (id, seq) answered; with expired, session id is
// dropped, so the next write opens a new one.
func (c *Client) endOnce(id, seq uint64, expired bool) {
	s := &c.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != id {
		return
	}
	delete(s.inflight, seq)
	if expired {
		s.id = 0
	}
}

// openSession opens a session with a new random id.
func (c *Client) openSession(ctx context.Context) (uint64, error) {
	var b [8]byte
	var id uint64
	for id == 0 {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		id = binary.BigEndian.Uint64(b[:])
	}
	req := &dkvpb.SessionOpenRequest{Id: id, TtlMs: c.cfg.SessionTTL.Milliseconds()}
	// Opening an open session only keeps it alive: it is sent again, as
	// an exactly-once write is, until answered or ctx ends.
	err := c.invokeAttempts(ctx, opOnce, false, true, nil, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.kv.SessionOpen(ctx, req, o...)
		return err
	})
	switch {
	case err == nil:
		return id, nil
	case status.Code(err) == codes.Unimplemented:
		return 0, fmt.Errorf("%w: %w", errNoSessions, err)
	case errors.Is(err, ErrUnknownOutcome):
		// The write that needed the session was never sent.
		return 0, &Error{Kind: ErrUnavailable, Msg: "could not open a client session before the deadline: " + err.Error()}
	}
	return 0, fmt.Errorf("open a client session: %w", err)
}

// errReopen: the write was refused, not applied, because its session
// expired; send it again in a new session.
var errReopen = errors.New("session expired before the write applied")

// callOnce runs a write exactly once (see above); without sessions
// (Config.SessionTTL < 0) it is call.
func (c *Client) callOnce(ctx context.Context, rpc func(context.Context, ...grpc.CallOption) error) error {
	if c.cfg.SessionTTL < 0 {
		return c.call(ctx, true, rpc)
	}
	for {
		id, seq, err := c.beginOnce(ctx)
		if errors.Is(err, errNoSessions) {
			return c.call(ctx, true, rpc)
		}
		if err != nil {
			return err
		}
		withSession := func(ctx context.Context) context.Context {
			return metadata.AppendToOutgoingContext(ctx, dkvpb.SessionMetadata, dkvpb.FormatSession(id, seq, c.ackedOnce(id, seq)))
		}
		err = c.invokeAttempts(ctx, opOnce, false, true, withSession, rpc)
		c.endOnce(id, seq, errors.Is(err, ErrSessionExpired))
		if !errors.Is(err, errReopen) {
			return err
		}
	}
}
