package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"google.golang.org/grpc/metadata"
)

// Client sessions (internal/state/session.go): a client's write carries
// its session in the gRPC metadata dkvpb.SessionMetadata; propose copies
// it into the command.

// sessionSweep is how often the leader looks for expired sessions, and
// maxSessionsPerExpire how many one SessionExpire drops at most.
const (
	sessionSweep         = 10 * time.Second
	maxSessionsPerExpire = 1000
)

// Members before 0.2 do not apply sessions (state.SessionsSince): a
// session opens only while every member has published 0.2 or later,
// decided at apply from the replicated member table; SessionOpen then
// answers Unimplemented, as an older server does, and the Go client
// writes without a session. A member of an older version that joins or
// is downgraded while sessions are in use would apply a repeated write
// twice: while one is in the member table, writes in a session are
// refused, unapplied, with SessionExpired (docs/operations.md, Upgrades).

// oldMemberCheck caches oldMember's answer for a second: it is asked on
// every write in a session, so the answer is read without a lock and
// only one caller at a time refreshes it.
type oldMemberCheck struct {
	last       atomic.Pointer[oldMemberAnswer]
	refreshing atomic.Bool
}

type oldMemberAnswer struct {
	at  time.Time
	err error
}

// oldMember says which member's version does not apply sessions, or nil.
func (s *Server) oldMember() error {
	c := &s.sessCheck
	a := c.last.Load()
	if a != nil {
		if time.Since(a.at) <= time.Second {
			return a.err
		}
		if !c.refreshing.CompareAndSwap(false, true) {
			return a.err // another caller is refreshing it
		}
		defer c.refreshing.Store(false)
	}
	n := &oldMemberAnswer{at: time.Now()}
	ms, err := s.sm.Latest().Members()
	if err != nil {
		n.err = err
	} else if m := state.OldMember(ms); m != nil {
		n.err = fmt.Errorf("member %x (%s) runs dkv %s, which does not apply client sessions", m.GetId(), m.GetName(), m.GetVersion())
	}
	c.last.Store(n)
	return n.err
}

// stampSession sets req's session from ctx's metadata, if it carries one,
// and the entry's time, which sessions are measured on.
func (s *Server) stampSession(ctx context.Context, req *dkvpb.InternalRequest) error {
	v := metadata.ValueFromIncomingContext(ctx, dkvpb.SessionMetadata)
	if len(v) == 0 {
		return nil
	}
	cs, err := dkvpb.ParseSession(v[0])
	if err != nil {
		return dkverr.New(dkverr.InvalidInput, "%v", err)
	}
	if _, ok := req.GetRequest().(*dkvpb.InternalRequest_SessionOpen); ok {
		return dkverr.New(dkverr.InvalidInput, "%s: a session is opened outside a session", dkvpb.SessionMetadata)
	}
	if err := s.oldMember(); err != nil {
		return dkverr.New(dkverr.SessionExpired, "%v; the request was not applied", err)
	}
	req.Session = cs
	if req.TimeUnixNano == 0 {
		req.TimeUnixNano = time.Now().UnixNano()
	}
	return nil
}

// sessionLoop, on the leader, drops the sessions that have expired.
func (s *Server) sessionLoop() {
	defer s.wg.Done()
	t := time.NewTicker(sessionSweep)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
		}
		if !s.node.Status().IsLeader {
			continue
		}
		now := time.Now().UnixNano()
		ids, err := s.sm.Latest().ExpiredSessions(now, maxSessionsPerExpire)
		if err != nil {
			s.log.Warn("list expired sessions", "err", err)
			continue
		}
		if len(ids) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), sessionSweep)
		_, err = s.proposeRequest(ctx, &dkvpb.InternalRequest{TimeUnixNano: now,
			Request: &dkvpb.InternalRequest_SessionExpire{SessionExpire: &dkvpb.SessionExpireRequest{Ids: ids}}})
		cancel()
		if err != nil {
			s.log.Debug("expire sessions", "err", err)
		}
	}
}
